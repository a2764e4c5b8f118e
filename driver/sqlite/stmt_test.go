package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
)

func openStmtTest(t *testing.T, migrate bool) (*Driver, context.Context) {
	t.Helper()
	// A deadlock on the writer's one connection ends the test here, not at
	// go test's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	d, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "idem.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if migrate {
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return d, ctx
}

func keyIDs(prefix string, n int) []driver.KeyID {
	ids := make([]driver.KeyID, n)
	for i := range ids {
		ids[i] = driver.KeyID{Operation: "op", Key: fmt.Sprintf("%s-%d", prefix, i)}
	}
	return ids
}

// claimAndRecord claims ids and stores an outcome for each in one
// transaction, as a batch of first arrivals does.
func claimAndRecord(ctx context.Context, d *Driver, ids []driver.KeyID) error {
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	now := time.Now()
	p := &driver.KeyClaimBatchParams{Now: now, ExpiresAt: now.Add(time.Hour)}
	var rec driver.KeyRecordBatchParams
	for _, id := range ids {
		p.Claims = append(p.Claims, driver.KeyClaimItem{ID: id, Fingerprint: []byte("fp")})
		rec.Records = append(rec.Records, driver.KeyRecordParams{ID: id, Status: 201, Body: []byte(id.Key)})
	}
	res, err := d.KeyClaimBatch(ctx, tx, p)
	if err != nil {
		return err
	}
	for i, r := range res {
		if !r.Claimed {
			return fmt.Errorf("key %s not claimed", ids[i].Key)
		}
	}
	if err := d.KeyRecordBatch(ctx, tx, &rec); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// checkRecords reads each key back through the reader pool.
func checkRecords(t *testing.T, ctx context.Context, d *Driver, ids []driver.KeyID) {
	t.Helper()
	for _, id := range ids {
		rec, err := d.KeyGet(ctx, d.Reader(), &driver.KeyGetParams{ID: id})
		if err != nil {
			t.Fatalf("%s: %v", id.Key, err)
		}
		if rec.Status != 201 || string(rec.Body) != id.Key || string(rec.Fingerprint) != "fp" {
			t.Fatalf("%s: status %d body %q fingerprint %q", id.Key, rec.Status, rec.Body, rec.Fingerprint)
		}
	}
}

// A transaction holds the writer's one connection: a statement prepared on
// the pool from inside it would wait for that connection forever. The hot
// statements run parsed in the transaction that first meets them, and the
// next Begin prepares them, before its transaction takes the connection.
func TestStmtCachePreparesOutsideTransactions(t *testing.T) {
	t.Parallel()
	d, ctx := openStmtTest(t, true)
	for round := range 3 {
		ids := keyIDs(fmt.Sprint("round", round), 8)
		if err := claimAndRecord(ctx, d, ids); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		checkRecords(t, ctx, d, ids)
	}
	d.writeStmts.mu.Lock()
	defer d.writeStmts.mu.Unlock()
	for _, q := range []string{sqlKeyClaimRows[3], sqlKeyRecordRows[3]} {
		if d.writeStmts.stmts[q] == nil {
			t.Errorf("not prepared after a batch:\n%s", q)
		}
	}
}

// A statement that failed before Migrate made its table is not kept; one
// prepared before a later schema change runs against the new schema
// (SQLite prepares it again), not against the columns it was prepared for.
func TestStmtCacheAcrossMigrations(t *testing.T) {
	t.Parallel()
	d, ctx := openStmtTest(t, false)
	ids := keyIDs("k", 4)
	if err := claimAndRecord(ctx, d, ids); err == nil {
		t.Fatal("claim before Migrate: no error")
	}
	if _, err := d.KeyGet(ctx, d.Reader(), &driver.KeyGetParams{ID: ids[0]}); err == nil {
		t.Fatal("read before Migrate: no error")
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second round runs prepared
		if err := claimAndRecord(ctx, d, ids[:2]); err != nil {
			t.Fatal(err)
		}
		checkRecords(t, ctx, d, ids[:2])
		ids = ids[2:]
	}

	// The same table with its columns in another order: a statement still
	// bound to the old layout would read the body as the fingerprint.
	ids = keyIDs("k", 4)
	if _, err := d.write.ExecContext(ctx, `
CREATE TABLE idem_keys_new (
    sealed INTEGER NOT NULL DEFAULT 0,
    body BLOB, header BLOB, status INTEGER NOT NULL DEFAULT 0, fingerprint BLOB NOT NULL,
    expires_at INTEGER NOT NULL, created_at INTEGER NOT NULL,
    key TEXT NOT NULL, operation TEXT NOT NULL, scope TEXT NOT NULL,
    PRIMARY KEY (scope, operation, key)) WITHOUT ROWID;
INSERT INTO idem_keys_new (scope, operation, key, fingerprint, status, header, body, sealed, created_at, expires_at)
SELECT scope, operation, key, fingerprint, status, header, body, sealed, created_at, expires_at FROM idem_keys;
DROP TABLE idem_keys;
ALTER TABLE idem_keys_new RENAME TO idem_keys;
CREATE INDEX idem_keys_expires_at ON idem_keys (expires_at)`); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, ctx, d, ids)
	more := keyIDs("after", 4)
	if err := claimAndRecord(ctx, d, more); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, ctx, d, more)
}

// One prepared statement cannot serve two result sets at once: running it
// again resets it under the rows still open. A statement whose rows are
// open runs parsed instead, so both read whole, and goroutines sharing a
// transaction each get their own answers.
func TestStmtCacheOverlappingUse(t *testing.T) {
	t.Parallel()
	d, ctx := openStmtTest(t, true)
	var accounts []driver.LedgerAccount
	var keys []driver.LedgerKey
	for i := range 6 {
		accounts = append(accounts, driver.LedgerAccount{Tenant: "t", ID: fmt.Sprint("a", i), Currency: "EUR"})
		keys = append(keys, driver.LedgerKey{Tenant: "t", ID: fmt.Sprint("a", i)})
	}
	byKeys := func(tx driver.Tx, keys []driver.LedgerKey) ([]string, error) {
		got, err := d.LedgerAccountsGet(ctx, tx, &driver.LedgerAccountsGetParams{Keys: keys})
		var ids []string
		for _, a := range got {
			ids = append(ids, a.ID)
		}
		return ids, err
	}
	for range 2 { // the first transaction notes the statements, the next Begin prepares them
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if accounts != nil {
			if _, err := d.LedgerAccountsInsert(ctx, tx, &driver.LedgerAccountsInsertParams{Accounts: accounts, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
			accounts = nil
		}
		if _, err := byKeys(tx, keys); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}

	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	keysJSON, err := jsonKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, sqlLedgerAccountsByKeys, keysJSON)
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	next := func() {
		t.Helper()
		if !rows.Next() {
			t.Fatalf("rows ended after %v: %v", first, rows.Err())
		}
		a, err := scanLedgerAccount(rows)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, a.ID)
	}
	next()
	next()
	if got, err := byKeys(tx, keys[3:]); err != nil || !slices.Equal(got, []string{"a3", "a4", "a5"}) {
		t.Fatalf("the same statement, its rows open: %v, %v", got, err)
	}
	for range 4 {
		next()
	}
	if rows.Next() {
		t.Fatal("rows go on past the last account")
	}
	rows.Close()
	if want := []string{"a0", "a1", "a2", "a3", "a4", "a5"}; !slices.Equal(first, want) {
		t.Fatalf("rows read %v, want %v", first, want)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				k := keys[(g+i)%len(keys)]
				got, err := byKeys(tx, []driver.LedgerKey{k})
				if err == nil && !slices.Equal(got, []string{k.ID}) {
					err = fmt.Errorf("goroutine %d asked for %s, got %v", g, k.ID, got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
