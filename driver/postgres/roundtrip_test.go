package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/testpg"
)

// roundTrips counts what a pool sends: each query and each batch is one
// round trip; a prepare is one more.
type roundTrips struct{ trips, prepares, statements atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.trips.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (c *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}
func (c *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// countedDriver is a driver on the test server whose pool, configured by
// set, counts what it sends.
func countedDriver(t *testing.T, set func(*pgxpool.Config)) (*Driver, *roundTrips) {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(testpg.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	set(pcfg)
	counter := &roundTrips{}
	pcfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &Driver{pool: pool, lockTimeout: 5 * time.Second}, counter
}

// A keeper batch of transfers is three round trips whatever its size: BEGIN
// with the claim, the ledger's locks with its reads and clock, and the
// ledger's write, the outbox's rows and the outcomes with COMMIT (the
// writes made through driver.Later); a single request with one statement
// of work is three; the relay's first read of a cycle, two; its mark of
// its rows as sent, one. Each write
// answers its own error from the round trip that carries it, and the
// check that the outcomes found their claims is the statement's own
// (idem_expect). Its per-transaction settings (lock timeout) and idem's
// generic plans add none, and, being parameters, no new statement to
// prepare when their values change.
func TestBatchRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := migratedSchema(t)
	d, counter := countedDriver(t, func(pcfg *pgxpool.Config) {
		pcfg.MaxConns = 1 // one connection, so its statement cache is warm on the second run
		pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	})
	now := time.Now()
	accounts := []driver.LedgerAccount{{Tenant: "t", ID: "a", Currency: "EUR"}, {Tenant: "t", ID: "b", Currency: "EUR"}}
	if _, err := d.LedgerAccountsInsert(ctx, d.Reader(), &driver.LedgerAccountsInsertParams{Accounts: accounts}); err != nil {
		t.Fatal(err)
	}

	batch := func(run int) {
		t.Helper()
		tx, err := d.Begin(ctx, driver.BeginOptions{LockTimeout: time.Duration(100+run) * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var claims []driver.KeyClaimItem
		var records []driver.KeyRecordParams
		var transfers []driver.LedgerTransfer
		var entries []driver.LedgerEntry
		var rows []driver.OutboxRow
		a, b := accounts[0], accounts[1]
		for i := range 3 {
			id := fmt.Sprintf("r%d-%d", run, i)
			claims = append(claims, driver.KeyClaimItem{ID: driver.KeyID{Scope: "t", Operation: "POST", Key: id}, Fingerprint: []byte("fp")})
			records = append(records, driver.KeyRecordParams{ID: claims[i].ID, Status: 201, Body: []byte("{}")})
			transfers = append(transfers, driver.LedgerTransfer{Tenant: "t", ID: id, DebitAccountID: "a", CreditAccountID: "b", Amount: 1, Currency: "EUR"})
			a.DebitsPosted, a.Sequence = a.DebitsPosted+1, a.Sequence+1
			b.CreditsPosted, b.Sequence = b.CreditsPosted+1, b.Sequence+1
			entries = append(entries,
				driver.LedgerEntry{Tenant: "t", AccountID: "a", Sequence: a.Sequence, TransferID: id, Amount: 1, DebitsPosted: a.DebitsPosted},
				driver.LedgerEntry{Tenant: "t", AccountID: "b", Sequence: b.Sequence, TransferID: id, Amount: 1, Credit: true, CreditsPosted: b.CreditsPosted})
			rows = append(rows, driver.OutboxRow{ID: fmt.Sprintf("0190a000-0000-7000-8000-00000000%d%d%02d", run, i, 0),
				Tenant: "t", Type: "transfer.created", Key: id, Payload: []byte("{}"), CreatedAt: now})
		}
		before := counter.trips.Load()
		beforePrep := counter.prepares.Load()
		claimed, err := d.KeyClaimBatch(ctx, tx, &driver.KeyClaimBatchParams{Claims: claims, Now: now, ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range claimed {
			if !c.Claimed {
				t.Fatalf("claim %d not made", i)
			}
		}
		keys := []driver.LedgerKey{{Tenant: "t", ID: "a"}, {Tenant: "t", ID: "b"}}
		locked, err := d.LedgerLock(ctx, tx, &driver.LedgerLockParams{TransferKeys: keys, AccountKeys: keys, Find: keys, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(locked.Accounts) != 2 || locked.Clock.IsZero() {
			t.Fatalf("locked %+v", locked)
		}
		if locked.Accounts[0].Sequence != accounts[0].Sequence || locked.Accounts[1].Sequence != accounts[1].Sequence {
			t.Fatalf("locked %+v, read before %+v", locked.Accounts, accounts)
		}
		if err := d.LedgerWrite(ctx, driver.Later(tx), &driver.LedgerWriteParams{Transfers: transfers, Entries: entries,
			Accounts: []driver.LedgerAccount{a, b}, At: locked.Clock}); err != nil {
			t.Fatal(err)
		}
		if err := d.OutboxInsert(ctx, driver.Later(tx), &driver.OutboxInsertParams{Rows: rows}); err != nil {
			t.Fatal(err)
		}
		if err := d.KeyRecordCommit(ctx, tx, &driver.KeyRecordBatchParams{Records: records}); err != nil {
			t.Fatal(err)
		}
		trips, prepares := counter.trips.Load()-before, counter.prepares.Load()-beforePrep
		if run > 0 && (trips != 3 || prepares != 0) {
			t.Errorf("run %d: %d round trips and %d prepares, want 3 and 0", run, trips, prepares)
		}
		var written int
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM ledger_transfers WHERE id = ANY($1)`,
			[]string{transfers[0].ID, transfers[1].ID, transfers[2].ID}).Scan(&written); err != nil || written != 3 {
			t.Fatalf("run %d: %d of 3 transfers written (%v)", run, written, err)
		}

		// A single request (Keeper.Do) is three: BEGIN with the claim, its
		// work's one statement, its outcome with COMMIT.
		single := driver.KeyID{Scope: "t", Operation: "POST", Key: fmt.Sprintf("single-%d", run)}
		before, beforePrep = counter.trips.Load(), counter.prepares.Load()
		one, err := d.Begin(ctx, driver.BeginOptions{LockTimeout: time.Duration(100+run) * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer one.Rollback(ctx)
		if c, err := d.KeyClaimBatch(ctx, one, &driver.KeyClaimBatchParams{Claims: []driver.KeyClaimItem{{ID: single, Fingerprint: []byte("fp")}},
			Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil || !c[0].Claimed {
			t.Fatalf("single claim: %+v %v", c, err)
		}
		if _, err := one.Exec(ctx, `INSERT INTO idem_secrets (name, value) VALUES ($1, '')`, single.Key); err != nil {
			t.Fatal(err)
		}
		if err := d.KeyRecordCommit(ctx, one, &driver.KeyRecordBatchParams{Records: []driver.KeyRecordParams{{ID: single, Status: 201}}}); err != nil {
			t.Fatal(err)
		}
		trips, prepares = counter.trips.Load()-before, counter.prepares.Load()-beforePrep
		if run > 0 && (trips != 3 || prepares != 0) {
			t.Errorf("run %d: a single request took %d round trips and %d prepares, want 3 and 0", run, trips, prepares)
		}

		// The relay's first read of a cycle is two: BEGIN with its
		// settings, the horizon and the rows, then COMMIT.
		var xmin int64
		if err := d.Reader().QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&xmin); err != nil {
			t.Fatal(err)
		}
		before, beforePrep = counter.trips.Load(), counter.prepares.Load()
		read, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer read.Rollback(ctx)
		shards := make([]int, driver.OutboxShards)
		for i := range shards {
			shards[i] = i
		}
		fetched, err := d.OutboxFetch(ctx, read, &driver.OutboxFetchParams{Shards: shards, Now: now, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if err := read.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		trips, prepares = counter.trips.Load()-before, counter.prepares.Load()-beforePrep
		if run > 0 && (trips != 2 || prepares != 0) {
			t.Errorf("run %d: the relay's first read took %d round trips and %d prepares, want 2 and 0", run, trips, prepares)
		}
		if len(fetched.Rows) != len(rows) || fetched.Horizon < xmin {
			t.Errorf("run %d: the first read found %d rows of %d, its horizon %d below the xmin read before it, %d",
				run, len(fetched.Rows), len(rows), fetched.Horizon, xmin)
		}

		// The relay's mark of what it published is one more: BEGIN, the
		// mark and COMMIT.
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		before, beforePrep = counter.trips.Load(), counter.prepares.Load()
		mark, err := d.Begin(ctx, driver.BeginOptions{LazyCommit: true})
		if err != nil {
			t.Fatal(err)
		}
		defer mark.Rollback(ctx)
		if err := d.OutboxMarkSent(ctx, driver.Later(mark), &driver.OutboxMarkSentParams{IDs: ids, Now: now}); err != nil {
			t.Fatal(err)
		}
		if err := mark.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		trips, prepares = counter.trips.Load()-before, counter.prepares.Load()-beforePrep
		if run > 0 && (trips != 1 || prepares != 0) {
			t.Errorf("run %d: the mark took %d round trips and %d prepares, want 1 and 0", run, trips, prepares)
		}
		var marked int
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_outbox WHERE id = ANY($1::uuid[]) AND sent_at IS NOT NULL`, ids).Scan(&marked); err != nil || marked != len(ids) {
			t.Fatalf("run %d: %d of %d rows marked sent (%v)", run, marked, len(ids), err)
		}
	}
	for run := range 3 {
		batch(run)
		accounts = nil
		got, err := d.LedgerAccountsGet(ctx, d.Reader(), &driver.LedgerAccountsGetParams{Keys: []driver.LedgerKey{{Tenant: "t", ID: "a"}, {Tenant: "t", ID: "b"}}})
		if err != nil {
			t.Fatal(err)
		}
		accounts = got
		if want := int64(3 * (run + 1)); got[0].DebitsPosted != want || got[1].CreditsPosted != want || got[0].Sequence != want {
			t.Fatalf("run %d: accounts %+v, want %d posted each", run, got, want)
		}
	}
	var stored int
	if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_keys WHERE status = 201`).Scan(&stored); err != nil || stored != 12 {
		t.Fatalf("stored outcomes %d (%v), want 12", stored, err)
	}
}

// Every statement returns its own error, with PostgreSQL's message and
// code, when it is called: none waits for a later statement or the commit.
// A write that must find its claims (KeyRecord, KeyRecordBatch) says so
// itself when it finds fewer, and nothing commits.
func TestOwnedTxErrorsWhereTheyHappen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := migratedSchema(t)
	d, err := Open(ctx, Config{URL: testpg.URL(t), SearchPath: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Reader().Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		t.Helper()
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	now := time.Now()
	id := driver.KeyID{Scope: "t", Operation: "POST", Key: "k"}

	// A unique violation is the insert's own error, code and message.
	tx, _ := d.Begin(ctx, driver.BeginOptions{})
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
	var pgErr *pgconn.PgError
	if !errors.Is(err, driver.ErrUniqueViolation) || !errors.As(err, &pgErr) || pgErr.Code != codeUniqueViolation ||
		!strings.Contains(pgErr.Message, "duplicate key") {
		t.Fatalf("duplicate insert: %v, want the insert's own unique violation", err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit of an aborted transaction succeeded")
	}

	// The record of a key never claimed fails at KeyRecord, not at commit.
	for _, record := range []func(driver.Tx) error{
		func(tx driver.Tx) error {
			return d.KeyRecord(ctx, tx, &driver.KeyRecordParams{ID: id, Status: 201})
		},
		func(tx driver.Tx) error {
			return d.KeyRecordBatch(ctx, tx, &driver.KeyRecordBatchParams{Records: []driver.KeyRecordParams{
				{ID: id, Status: 201}, {ID: driver.KeyID{Scope: "t", Operation: "POST", Key: "k2"}, Status: 201}}})
		},
		func(tx driver.Tx) error {
			return d.KeyRecordBatch(ctx, tx, &driver.KeyRecordBatchParams{Release: []driver.KeyID{id}})
		},
		// With COMMIT in its round trip, COMMIT does not run: the
		// transaction stays open for its Rollback.
		func(tx driver.Tx) error {
			return d.KeyRecordCommit(ctx, tx.(driver.TxCloser), &driver.KeyRecordBatchParams{Records: []driver.KeyRecordParams{{ID: id, Status: 201}}})
		},
		func(tx driver.Tx) error {
			return d.KeyRecordCommit(ctx, tx.(driver.TxCloser), &driver.KeyRecordBatchParams{Records: []driver.KeyRecordParams{
				{ID: id, Status: 201}, {ID: driver.KeyID{Scope: "t", Operation: "POST", Key: "k2"}, Status: 201}}})
		},
	} {
		tx, _ := d.Begin(ctx, driver.BeginOptions{})
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (2)`); err != nil {
			t.Fatal(err)
		}
		err := record(tx)
		if rerr := tx.Rollback(ctx); rerr != nil {
			t.Fatalf("rollback after a failed record: %v", rerr)
		}
		if !errors.Is(err, driver.ErrNotFound) || !strings.Contains(err.Error(), "0 of") {
			t.Fatalf("record without a claim: %v, want ErrNotFound from the record itself", err)
		}
	}

	// A claimed key's record succeeds and commits with the transaction,
	// as a statement of its own or in COMMIT's round trip; a Commit after
	// KeyRecordCommit answers nil, for the wrappers around the transaction.
	for i, commit := range []func(tx driver.TxCloser, p *driver.KeyRecordBatchParams) error{
		func(tx driver.TxCloser, p *driver.KeyRecordBatchParams) error {
			if err := d.KeyRecordBatch(ctx, tx, p); err != nil {
				return err
			}
			return tx.Commit(ctx)
		},
		func(tx driver.TxCloser, p *driver.KeyRecordBatchParams) error {
			if err := d.KeyRecordCommit(ctx, tx, p); err != nil {
				return err
			}
			return tx.Commit(ctx)
		},
	} {
		id := driver.KeyID{Scope: "t", Operation: "POST", Key: fmt.Sprintf("k-%d", i)}
		tx, _ = d.Begin(ctx, driver.BeginOptions{})
		if res, err := d.KeyClaim(ctx, tx, &driver.KeyClaimParams{ID: id, Fingerprint: []byte("fp"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil || !res.Claimed {
			t.Fatalf("claim: %+v %v", res, err)
		}
		if err := commit(tx, &driver.KeyRecordBatchParams{Records: []driver.KeyRecordParams{{ID: id, Status: 201}}}); err != nil {
			t.Fatal(err)
		}
		if rec, err := d.KeyGet(ctx, d.Reader(), &driver.KeyGetParams{ID: id}); err != nil || rec.Status != 201 {
			t.Fatalf("record after commit: %+v %v", rec, err)
		}
	}

	if got := count(); got != 0 {
		t.Fatalf("rows %d, want none: every transaction that wrote one failed", got)
	}
	if n := d.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still held", n)
	}
}

// idem's statements over arrays run under a generic plan, and only they:
// the statements around them in the transaction, the user's among them,
// run under the session's plan_cache_mode, whatever it is.
func TestGenericPlansOnlyForIdemStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := Open(ctx, Config{URL: testpg.URL(t), SearchPath: migratedSchema(t), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	mode := func(tx driver.Tx) (m string) {
		t.Helper()
		if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	now := time.Now()
	ids := []driver.KeyID{{Scope: "t", Operation: "POST", Key: "a"}, {Scope: "t", Operation: "POST", Key: "b"}}
	for _, session := range []string{"auto", "force_custom_plan"} {
		if _, err := d.Reader().Exec(ctx, `SELECT set_config('plan_cache_mode', $1, false)`, session); err != nil {
			t.Fatal(err)
		}
		tx, err := d.Begin(ctx, driver.BeginOptions{LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		claims := []driver.KeyClaimItem{{ID: ids[0], Fingerprint: []byte("fp")}, {ID: ids[1], Fingerprint: []byte("fp")}}
		if _, err := d.KeyClaimBatch(ctx, tx, &driver.KeyClaimBatchParams{Claims: claims, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if m := mode(tx); m != session {
			t.Fatalf("after the claim: plan_cache_mode %q, want the session's %q", m, session)
		}
		if err := d.KeyRecordBatch(ctx, tx, &driver.KeyRecordBatchParams{Records: []driver.KeyRecordParams{{ID: ids[0], Status: 201}}, Release: ids[1:]}); err != nil {
			t.Fatal(err)
		}
		if m := mode(tx); m != session {
			t.Fatalf("after the record: plan_cache_mode %q, want the session's %q", m, session)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A transaction's own settings (lock timeout, lazy commit)
// are one statement, sent with its BEGIN and its first statement.
func TestBeginSettingsOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, counter := countedDriver(t, func(pcfg *pgxpool.Config) {
		// synchronous_commit on, as in production (a throwaway test server
		// runs with it off).
		pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	})
	for _, opts := range []driver.BeginOptions{
		{LockTimeout: 250 * time.Millisecond, LazyCommit: true},
		{LockTimeout: 250 * time.Millisecond},
		{LazyCommit: true},
		{},
	} {
		counter.trips.Store(0)
		counter.statements.Store(0)
		tx, err := d.Begin(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		var lockTimeout, plans, commit string
		if err := tx.QueryRow(ctx, `SELECT current_setting('lock_timeout'), current_setting('plan_cache_mode'),
		                                  current_setting('synchronous_commit')`).Scan(&lockTimeout, &plans, &commit); err != nil {
			t.Fatal(err)
		}
		n, trips := counter.statements.Load(), counter.trips.Load()
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		want := [3]string{"0", "auto", "on"}
		statements := int64(2) // BEGIN and the query
		if opts.LockTimeout > 0 {
			want[0] = "250ms"
		}
		if opts.LazyCommit {
			want[2] = "off"
		}
		if opts != (driver.BeginOptions{}) {
			statements++
		}
		if got := [3]string{lockTimeout, plans, commit}; got != want {
			t.Errorf("%+v: lock_timeout, plan_cache_mode, synchronous_commit %q, want %q", opts, got, want)
		}
		if n != statements || trips != 1 {
			t.Errorf("%+v: %d statements in %d round trips, want %d in 1", opts, n, trips, statements)
		}
	}
}

// A write made through driver.Later waits for the transaction's next round
// trip and answers its own error, named, from the call that sends it: the
// commit's, where COMMIT then does not run and nothing is stored; or a
// later statement's, which runs after it and sees it. In a transaction the
// driver did not begin it runs at once.
func TestLaterWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := migratedSchema(t)
	d, err := Open(ctx, Config{URL: testpg.URL(t), SearchPath: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	row := func(id string) driver.OutboxRow {
		return driver.OutboxRow{ID: id, Tenant: "t", Type: "x", Key: "k", Payload: []byte("{}"), CreatedAt: time.Now()}
	}
	const taken, fresh = "0190a000-0000-7000-8000-000000000001", "0190a000-0000-7000-8000-000000000002"
	if err := d.OutboxInsert(ctx, d.Reader(), &driver.OutboxInsertParams{Rows: []driver.OutboxRow{row(taken)}}); err != nil {
		t.Fatal(err)
	}
	count := func(q driver.Tx, id string) (n int) {
		t.Helper()
		if err := q.QueryRow(ctx, `SELECT count(*) FROM idem_outbox WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	key := driver.KeyID{Scope: "t", Operation: "POST", Key: "later"}
	claim := func(tx driver.Tx) {
		t.Helper()
		if c, err := d.KeyClaimBatch(ctx, tx, &driver.KeyClaimBatchParams{Claims: []driver.KeyClaimItem{{ID: key, Fingerprint: []byte("fp")}},
			Now: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}); err != nil || !c[0].Claimed {
			t.Fatalf("claim: %+v %v", c, err)
		}
	}

	// Failing at the commit: the write's own error, and nothing stored.
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim(tx)
	if err := d.OutboxInsert(ctx, driver.Later(tx), &driver.OutboxInsertParams{Rows: []driver.OutboxRow{row(fresh), row(taken)}}); err != nil {
		t.Fatalf("a later write failed before it was sent: %v", err)
	}
	err = d.KeyRecordCommit(ctx, tx, &driver.KeyRecordBatchParams{Records: []driver.KeyRecordParams{{ID: key, Status: 201}}})
	var pgErr *pgconn.PgError
	if !errors.Is(err, driver.ErrUniqueViolation) || !errors.As(err, &pgErr) || !strings.HasPrefix(err.Error(), "postgres: outbox insert: ") {
		t.Fatalf("commit after a failing later write: %v, want the outbox insert's own unique violation", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var keys int
	if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_keys WHERE key = 'later'`).Scan(&keys); err != nil || keys != 0 || count(d.Reader(), fresh) != 0 {
		t.Fatalf("after the failed commit: %d keys, %d fresh rows (%v), want none", keys, count(d.Reader(), fresh), err)
	}

	// Sent by the next statement, which sees it; then stored by the commit.
	tx, err = d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim(tx)
	if err := d.OutboxInsert(ctx, driver.Later(tx), &driver.OutboxInsertParams{Rows: []driver.OutboxRow{row(fresh)}}); err != nil {
		t.Fatal(err)
	}
	if n := count(tx, fresh); n != 1 {
		t.Fatalf("a statement after a later write sees %d of its rows, want 1", n)
	}
	if err := tx.Commit(ctx); err != nil || count(d.Reader(), fresh) != 1 {
		t.Fatalf("commit: %v, %d rows", err, count(d.Reader(), fresh))
	}

	// In a transaction of the caller's, at once.
	pool, err := pgxpool.New(ctx, testpg.URL(t)+"&search_path="+schema)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ptx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ptx.Rollback(ctx)
	err = d.OutboxInsert(ctx, driver.Later(TxFromPgx(ptx)), &driver.OutboxInsertParams{Rows: []driver.OutboxRow{row(taken)}})
	if !errors.Is(err, driver.ErrUniqueViolation) {
		t.Fatalf("a later write in the caller's transaction: %v, want its unique violation at once", err)
	}
}

// A settlement learns its hold's accounts in the statement that locks
// them: LedgerLock with AccountsOf locks the hold's two accounts, finds
// the hold and reads the clock in one round trip (BEGIN included), where
// reading the hold first took one more.
func TestSettlementLocksInOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := migratedSchema(t)
	d, counter := countedDriver(t, func(pcfg *pgxpool.Config) {
		pcfg.MaxConns = 1
		pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	})
	accounts := []driver.LedgerAccount{{Tenant: "t", ID: "a", Currency: "EUR"}, {Tenant: "t", ID: "b", Currency: "EUR"},
		{Tenant: "t", ID: "c", Currency: "EUR"}}
	if _, err := d.LedgerAccountsInsert(ctx, d.Reader(), &driver.LedgerAccountsInsertParams{Accounts: accounts}); err != nil {
		t.Fatal(err)
	}
	// Another pool, whose transaction tries the lock.
	rival, _ := countedDriver(t, func(pcfg *pgxpool.Config) {
		pcfg.MaxConns = 1
		pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	})
	hold := driver.LedgerTransfer{Tenant: "t", ID: "h", DebitAccountID: "c", CreditAccountID: "a", Amount: 5, Currency: "EUR",
		Pending: true}
	if err := d.LedgerWrite(ctx, d.Reader(), &driver.LedgerWriteParams{Transfers: []driver.LedgerTransfer{hold}, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for run := range 2 {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before := counter.trips.Load()
		settlement := driver.LedgerKey{Tenant: "t", ID: fmt.Sprintf("s%d", run)}
		held := driver.LedgerKey{Tenant: "t", ID: "h"}
		locked, err := d.LedgerLock(ctx, tx, &driver.LedgerLockParams{TransferKeys: []driver.LedgerKey{settlement},
			AccountsOf: []driver.LedgerKey{held, {Tenant: "t", ID: "none"}}, Find: []driver.LedgerKey{settlement, held}, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if trips := counter.trips.Load() - before; run > 0 && trips != 1 {
			t.Errorf("run %d: %d round trips, want 1", run, trips)
		}
		if len(locked.Accounts) != 2 || locked.Accounts[0].ID != "a" || locked.Accounts[1].ID != "c" ||
			len(locked.Found) != 1 || locked.Found[0].ID != "h" || locked.Clock.IsZero() {
			t.Fatalf("locked %+v", locked)
		}
		// The accounts are locked: another transaction cannot take one.
		other, err := rival.Begin(ctx, driver.BeginOptions{LockTimeout: 50 * time.Millisecond})
		if err == nil {
			_, err = rival.LedgerLock(ctx, other, &driver.LedgerLockParams{AccountKeys: []driver.LedgerKey{{Tenant: "t", ID: "c"}}, Now: time.Now()})
			other.Rollback(ctx)
		}
		if err == nil {
			t.Fatalf("run %d: account c was not locked", run)
		}
		tx.Rollback(ctx)
	}
}
