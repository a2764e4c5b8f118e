package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/internal/testpgbouncer"
)

// Behind a transaction pooler the session settings cost no round trip: a
// transaction's first statement travels with BEGIN and the settings, a
// reader's statement with the settings, and nothing is prepared on its
// own. The settings hold, the URL's own (work_mem, synchronous_commit)
// among them, and a transaction's own (lock_timeout, a lazy commit) win.
func TestPoolerSettingsCostNoRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pgb := testpgbouncer.New(t, testpg.URL(t), testpgbouncer.Options{PoolSize: 2})
	schema := testpg.Schema(t)
	cfg := Config{URL: pgb.URL + "&work_mem=7MB&synchronous_commit=on", SearchPath: schema, StatementTimeout: 4 * time.Second, Pooler: PoolerTransaction}.withDefaults()
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["lock_timeout"] = "5000"
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	applyLimits(pcfg, cfg)
	p := newPooler(pcfg, cfg)
	counter := &roundTrips{}
	pcfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d := &Driver{pool: pool, lockTimeout: 5 * time.Second, pooler: p, connConfig: pcfg.ConnConfig}
	if len(pcfg.ConnConfig.RuntimeParams) != 0 {
		t.Fatalf("startup parameters left for the pooler to refuse: %v", pcfg.ConnConfig.RuntimeParams)
	}

	const query = `SELECT current_setting('lock_timeout'), current_setting('statement_timeout'), current_setting('search_path'),
       current_setting('work_mem'), current_setting('synchronous_commit')`
	for _, opts := range []driver.BeginOptions{{LockTimeout: 250 * time.Millisecond, LazyCommit: true}, {}} {
		counter.trips.Store(0)
		counter.prepares.Store(0)
		tx, err := d.Begin(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		var got [5]string
		if err := tx.QueryRow(ctx, query).Scan(&got[0], &got[1], &got[2], &got[3], &got[4]); err != nil {
			t.Fatal(err)
		}
		trips, prepares := counter.trips.Load(), counter.prepares.Load()
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		want := [5]string{"5s", "4s", schema, "7MB", "on"}
		if opts.LockTimeout > 0 {
			want[0] = "250ms"
		}
		if opts.LazyCommit {
			want[4] = "off"
		}
		if got != want {
			t.Errorf("%+v: settings %q, want %q", opts, got, want)
		}
		if trips != 1 || prepares != 0 {
			t.Errorf("%+v: %d round trips and %d prepares, want 1 and 0", opts, trips, prepares)
		}
	}
	counter.trips.Store(0)
	var got [5]string
	if err := d.Reader().QueryRow(ctx, query).Scan(&got[0], &got[1], &got[2], &got[3], &got[4]); err != nil {
		t.Fatal(err)
	}
	if want := [5]string{"5s", "4s", schema, "7MB", "on"}; got != want || counter.trips.Load() != 1 || counter.prepares.Load() != 0 {
		t.Errorf("the reader: settings %q in %d round trips (%d prepares), want %q in 1", got, counter.trips.Load(), counter.prepares.Load(), want)
	}
}
