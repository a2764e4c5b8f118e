package idem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/drivertest"
)

// A key past its retention is remembered until its memory: a copy on day
// 2 gets ErrKeyExpired and does nothing again, another request under the
// key gets the reuse answer, before the janitor runs (the record past its
// retention) as after it (the tombstone), by Do and by a Batcher alike.
// The janitor turns records into tombstones and deletes tombstones past
// the memory in bounded batches; after the memory the key is new.
func TestTombstones(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var mu sync.Mutex
		now := time.Date(2026, 11, 29, 14, 2, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		r := newRig(t, d, idem.Config{Retention: 24 * time.Hour, Memory: 30 * 24 * time.Hour, JanitorBatch: 10, Clock: clock},
			idem.BatchConfig{})
		k := r.k
		ctx := context.Background()
		var runs atomic.Int64
		for i := range 25 {
			if _, err := k.Do(ctx, req(fmt.Sprintf("k%d", i), `{"n":1}`), insertWork(&runs, 201, `{"id":"t"}`)); err != nil {
				t.Fatal(err)
			}
		}
		// copies asks for each key's copy and another request under it,
		// through Do and through the Batcher, and checks that nothing ran.
		copies := func(when string, keys ...string) {
			t.Helper()
			for _, key := range keys {
				res, err := k.Do(ctx, req(key, `{"n":1}`), insertWork(&runs, 201, `{}`))
				if !errors.Is(err, idem.ErrKeyExpired) {
					t.Fatalf("%s: copy of %s: %v %+v, want ErrKeyExpired", when, key, err, res)
				}
				if _, err := r.b.Do(ctx, req(key, `{"n":1}`), thing{key: key, body: "{}"}); !errors.Is(err, idem.ErrKeyExpired) {
					t.Fatalf("%s: batched copy of %s: %v, want ErrKeyExpired", when, key, err)
				}
				var reused *idem.ReusedError
				if _, err := k.Do(ctx, req(key, `{"n":2}`), insertWork(&runs, 201, `{}`)); !errors.As(err, &reused) || reused.Stored.Status != 201 {
					t.Fatalf("%s: another request under %s: %v, want a *ReusedError with the stored 201", when, key, err)
				}
				if _, err := r.b.Do(ctx, req(key, `{"n":2}`), thing{key: key, body: "{}"}); !errors.Is(err, idem.ErrKeyReused) {
					t.Fatalf("%s: another batched request under %s: %v, want ErrKeyReused", when, key, err)
				}
			}
			if got := countRows(t, d, "biz"); got != 25 || runs.Load() != 25 {
				t.Fatalf("%s: biz rows %d, runs %d; want 25 and 25", when, got, runs.Load())
			}
		}

		advance(25 * time.Hour) // day 2
		copies("day 2, before the janitor", "k0", "k1")
		var batches []int
		for {
			n, err := k.DeleteExpired(ctx)
			if err != nil {
				t.Fatal(err)
			}
			batches = append(batches, n)
			if n < 10 {
				break
			}
		}
		if fmt.Sprint(batches) != "[10 10 5]" {
			t.Fatalf("janitor batches %v, want [10 10 5]", batches)
		}
		if keys, stones := countRows(t, d, "idem_keys"), countRows(t, d, "idem_tombstones"); keys != 0 || stones != 25 {
			t.Fatalf("after the retention: %d records, %d tombstones; want 0 and 25", keys, stones)
		}
		copies("day 2, tombstones", "k0", "k2")
		advance(28 * 24 * time.Hour) // day 30, the memory not yet over
		copies("day 30", "k3")
		if n, err := k.DeleteExpired(ctx); err != nil || n != 0 {
			t.Fatalf("janitor inside the memory: %d, %v; want 0", n, err)
		}

		advance(24 * time.Hour) // day 31: the key behaves as new
		if res, err := k.Do(ctx, req("k4", `{"n":1}`), insertWork(&runs, 201, `{}`)); err != nil || res.Replayed {
			t.Fatalf("after the memory: %v %+v, want a first arrival", err, res)
		}
		if res, err := r.b.Do(ctx, req("k5", `{"n":3}`), thing{key: "k5", body: "{}"}); err != nil || res.Replayed {
			t.Fatalf("after the memory, batched: %v %+v, want a first arrival", err, res)
		}
		if got := countRows(t, d, "biz"); got != 27 {
			t.Fatalf("biz rows %d, want 27", got)
		}
		batches = batches[:0]
		for {
			n, err := k.DeleteExpired(ctx)
			if err != nil {
				t.Fatal(err)
			}
			batches = append(batches, n)
			if n < 10 {
				break
			}
		}
		if fmt.Sprint(batches) != "[10 10 5]" {
			t.Fatalf("janitor batches past the memory %v, want [10 10 5]", batches)
		}
		if keys, stones := countRows(t, d, "idem_keys"), countRows(t, d, "idem_tombstones"); keys != 2 || stones != 0 {
			t.Fatalf("after the memory: %d records, %d tombstones; want the 2 renewed and 0", keys, stones)
		}
	})
}

// DoTx, in the caller's transaction (on PostgreSQL through the claim's
// guard), judges a copy on day 2 by the tombstone as Do does:
// ErrKeyExpired and nothing run; another request under the key is a reuse.
func TestTombstoneDoTx(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var mu sync.Mutex
		now := time.Date(2026, 11, 29, 14, 2, 0, 0, time.UTC)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		setup(t, d)
		k := newKeeper(t, d, idem.Config{Retention: 24 * time.Hour, Memory: 30 * 24 * time.Hour, Clock: clock})
		ctx := context.Background()
		var runs atomic.Int64
		tx := userTx(t, d)
		if _, err := k.DoTx(ctx, tx, req("order-7", `{"n":1}`), insertWork(&runs, 201, `{"id":"t"}`)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		now = now.Add(25 * time.Hour) // day 2
		mu.Unlock()
		if n, err := k.DeleteExpired(ctx); err != nil || n != 1 {
			t.Fatalf("janitor: %d, %v; want 1", n, err)
		}
		tx = userTx(t, d)
		_, err := k.DoTx(ctx, tx, req("order-7", `{"n":1}`), insertWork(&runs, 201, `{}`))
		if rerr := tx.Rollback(ctx); rerr != nil {
			t.Fatal(rerr)
		}
		if !errors.Is(err, idem.ErrKeyExpired) {
			t.Fatalf("DoTx copy on day 2: %v, want ErrKeyExpired", err)
		}
		tx = userTx(t, d)
		_, err = k.DoTx(ctx, tx, req("order-7", `{"n":2}`), insertWork(&runs, 201, `{}`))
		if rerr := tx.Rollback(ctx); rerr != nil {
			t.Fatal(rerr)
		}
		if !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("DoTx of another request on day 2: %v, want ErrKeyReused", err)
		}
		if runs.Load() != 1 || countRows(t, d, "biz") != 1 || countRows(t, d, "idem_tombstones") != 1 || countRows(t, d, "idem_keys") != 0 {
			t.Fatalf("runs %d, biz rows %d, tombstones %d, records %d; want 1, 1, 1, 0", runs.Load(),
				countRows(t, d, "biz"), countRows(t, d, "idem_tombstones"), countRows(t, d, "idem_keys"))
		}
	})
}

// With Memory equal to Retention there are no tombstones: the janitor
// deletes records outright, and a key is new after its retention.
func TestNoMemoryBeyondRetention(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		now := time.Date(2026, 11, 29, 14, 2, 0, 0, time.UTC)
		k := newKeeper(t, d, idem.Config{Retention: time.Hour, Memory: time.Hour, Clock: func() time.Time { return now }})
		ctx := context.Background()
		var runs atomic.Int64
		if _, err := k.Do(ctx, req("a", `{}`), insertWork(&runs, 201, `{}`)); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Hour)
		if n, err := k.DeleteExpired(ctx); err != nil || n != 1 {
			t.Fatalf("janitor: %d, %v; want 1", n, err)
		}
		if keys, stones := countRows(t, d, "idem_keys"), countRows(t, d, "idem_tombstones"); keys != 0 || stones != 0 {
			t.Fatalf("%d records, %d tombstones; want none", keys, stones)
		}
	})
}

// Memory is bounded by Retention below and 400 days above.
func TestMemoryBounds(t *testing.T) {
	d := drivertest.Open(t, "sqlite")
	for _, cfg := range []idem.Config{
		{Retention: 48 * time.Hour, Memory: 24 * time.Hour},
		{Memory: 401 * 24 * time.Hour},
	} {
		if _, err := idem.New(d, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	k := newKeeper(t, d, idem.Config{Retention: 60 * 24 * time.Hour})
	if got := k.Config().Memory; got != 60*24*time.Hour {
		t.Errorf("default Memory beside a 60-day Retention: %s, want the Retention", got)
	}
	if got := newKeeper(t, d, idem.Config{}).Config().Memory; got != 30*24*time.Hour {
		t.Errorf("default Memory: %s, want 30 days", got)
	}
}

// A claim that waits on a record the janitor is moving to its tombstone
// inserts once the janitor commits, in a snapshot that missed the
// tombstone: idem_claimable refuses it, and the work runs not at all.
// Postgres only: on SQLite's one writer a claim never waits on the janitor.
func TestClaimBehindTheJanitor(t *testing.T) {
	d := drivertest.Open(t, "postgres")
	setup(t, d)
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 29, 14, 2, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	k := newKeeper(t, d, idem.Config{Retention: time.Hour, Memory: 48 * time.Hour, Clock: clock})
	ctx := context.Background()
	var runs atomic.Int64
	if _, err := k.Do(ctx, req("moved", `{}`), insertWork(&runs, 201, `{}`)); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(2 * time.Hour))

	janitor, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer janitor.Rollback(ctx)
	if n, err := d.KeyDeleteExpired(ctx, janitor, &driver.KeyDeleteExpiredParams{
		Now: clock(), ForgetBefore: clock().Add(-48 * time.Hour), Limit: 10}); err != nil || n != 1 {
		t.Fatalf("janitor: %d, %v", n, err)
	}

	tx := userTx(t, d)
	defer tx.Rollback(ctx)
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := k.DoTx(ctx, tx, req("moved", `{}`), insertWork(&runs, 201, `{}`))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := d.Reader().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`,
			pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the claim returned while the janitor held the record: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim did not wait for the janitor's lock in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := janitor.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, idem.ErrKeyExpired) {
		t.Fatalf("claim behind the janitor: %v, want ErrKeyExpired", err)
	}
	_ = tx.Rollback(ctx)
	if got := countRows(t, d, "biz"); got != 1 || runs.Load() != 1 {
		t.Fatalf("biz rows %d, runs %d; want 1 and 1", got, runs.Load())
	}
	if keys, stones := countRows(t, d, "idem_keys"), countRows(t, d, "idem_tombstones"); keys != 0 || stones != 1 {
		t.Fatalf("%d records, %d tombstones; want 0 and 1", keys, stones)
	}
}

// tombstoneKeys is how many keys TestTombstoneSize measures over;
// IDEM_TOMBSTONE_KEYS raises it (docs/operations.md gives 1,000,000).
func tombstoneKeys(t *testing.T) int {
	n := 20000
	if v := os.Getenv("IDEM_TOMBSTONE_KEYS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 10_000_000 {
			t.Fatalf("IDEM_TOMBSTONE_KEYS=%q: want 1..10000000", v)
		}
	}
	return n
}

// A tombstone's row data is at most 64 bytes on PostgreSQL (the sum of
// pg_column_size of its columns); the test reports that, the bytes a
// tombstone takes in the table's and its indexes' pages, and what the same
// key takes as a record without its answer in idem_keys. On SQLite it
// reports the pages' bytes per tombstone. The tombstones are made by the
// janitor's own statements from records of 36-character keys and 32-byte
// fingerprints.
func TestTombstoneSize(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		n := tombstoneKeys(t)
		now := time.Date(2026, 11, 29, 14, 2, 0, 0, time.UTC)
		created := now.Add(-48 * time.Hour)
		r := d.Reader()
		exec := func(sql string, args ...any) {
			t.Helper()
			tx, err := d.Begin(ctx, driver.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, sql, args...); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		_, pg := d.(*postgres.Driver)
		if pg {
			exec(`INSERT INTO idem_keys (scope, operation, key, fingerprint, status, created_at, expires_at)
			      SELECT 'tenant-a', 'POST /v1/transfers', md5(i::text)::uuid::text, sha256(i::text::bytea), 201, $2::timestamptz, $2::timestamptz + interval '1 day'
			        FROM generate_series(1, $1::int) i`, n, created)
			var record float64
			if err := r.QueryRow(ctx, `SELECT avg(pg_column_size(scope) + pg_column_size(operation) + pg_column_size(key) +
			    pg_column_size(fingerprint) + pg_column_size(status) + pg_column_size(created_at) + pg_column_size(expires_at))
			  FROM idem_keys`).Scan(&record); err != nil {
				t.Fatal(err)
			}
			t.Logf("postgres: a record without its answer in idem_keys: %.1f bytes of row data", record)
		} else {
			exec(`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
			      INSERT INTO idem_keys (scope, operation, key, fingerprint, status, created_at, expires_at)
			      SELECT 'tenant-a', 'POST /v1/transfers', lower(hex(randomblob(18))), randomblob(32), 201, ?2, ?2 + 86400000000 FROM s`,
				n, created.UnixMicro())
		}
		for {
			tx, err := d.Begin(ctx, driver.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			m, err := d.KeyDeleteExpired(ctx, tx, &driver.KeyDeleteExpiredParams{Now: now, ForgetBefore: now.Add(-30 * 24 * time.Hour), Limit: 50000})
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if m < 50000 {
				break
			}
		}
		if got := countRows(t, d, "idem_tombstones"); got != n {
			t.Fatalf("%d tombstones, want %d", got, n)
		}
		if pg {
			var avg, most, heap, index float64
			if err := r.QueryRow(ctx, `SELECT avg(s), max(s), pg_relation_size('idem_tombstones')::float8 / count(*),
			    pg_indexes_size('idem_tombstones')::float8 / count(*)
			  FROM (SELECT pg_column_size(scope) + pg_column_size(id) + pg_column_size(fingerprint) + pg_column_size(status) + pg_column_size(created_at) AS s
			          FROM idem_tombstones) t`).Scan(&avg, &most, &heap, &index); err != nil {
				t.Fatal(err)
			}
			t.Logf("postgres, %d tombstones: %.1f bytes of row data (most %.0f); %.1f bytes of table pages and %.1f of index pages each",
				n, avg, most, heap, index)
			if most > 64 {
				t.Fatalf("a tombstone holds %.0f bytes of row data, want at most 64", most)
			}
			return
		}
		var data, pages float64
		if err := r.QueryRow(ctx, `SELECT avg(length(id) + length(fingerprint) + 8 + 8) FROM idem_tombstones`).Scan(&data); err != nil {
			t.Fatal(err)
		}
		if err := r.QueryRow(ctx, `SELECT CAST(sum(pgsize) AS REAL) / ?1 FROM dbstat WHERE name IN ('idem_tombstones', 'idem_tombstones_created_at')`, n).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		t.Logf("sqlite, %d tombstones: %.0f bytes of values at most; %.1f bytes of table and index pages each", n, data, pages)
	})
}

// PostgreSQL computes a tombstone's id and fingerprint in SQL (the
// janitor's statement and the claim's): they are driver.TombstoneID and
// driver.TombstoneFingerprint, byte for byte, whatever the names hold.
func TestTombstoneHashesMatchSQL(t *testing.T) {
	d := drivertest.Open(t, "postgres")
	ctx := context.Background()
	for _, id := range []driver.KeyID{
		{Scope: "", Operation: "", Key: "k"},
		{Scope: "tenant-a", Operation: "POST /v1/transfers", Key: "0b6f-ab"},
		{Scope: "ab", Operation: "c", Key: "d"}, {Scope: "a", Operation: "bc", Key: "d"},
		{Scope: "münchen", Operation: "POST /v1/überweisungen", Key: "x"},
	} {
		fp := []byte(id.Scope + "|fingerprint")
		var gotID, gotFP []byte
		if err := d.Reader().QueryRow(ctx, `SELECT idem_tombstone_id($1, $2, $3), substr(sha256($4::bytea), 1, 16)`,
			id.Scope, id.Operation, id.Key, fp).Scan(&gotID, &gotFP); err != nil {
			t.Fatal(err)
		}
		if string(gotID) != string(driver.TombstoneID(id)) || string(gotFP) != string(driver.TombstoneFingerprint(fp)) {
			t.Fatalf("%+v: SQL %x %x, Go %x %x", id, gotID, gotFP, driver.TombstoneID(id), driver.TombstoneFingerprint(fp))
		}
	}
	if string(driver.TombstoneID(driver.KeyID{Scope: "ab", Operation: "c", Key: "d"})) ==
		string(driver.TombstoneID(driver.KeyID{Scope: "a", Operation: "bc", Key: "d"})) {
		t.Fatal("two keys whose parts split differently share a tombstone id")
	}
}
