package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The ceiling's script becomes its one statement, with pgbench's variables
// as parameters and its casts and JSON left as they are.
func TestPgbenchStatement(t *testing.T) {
	src, err := os.ReadFile("../pgbench/transfer_one_statement.sql")
	if err != nil {
		t.Fatal(err)
	}
	sql, err := pgbenchStatement(string(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"'one-' || $1::bigint", "'acc-' || $2::bigint", "'acc-' || $3::bigint",
		"($1::bigint::bigint % 64)::integer", `"Location":["/v1/transfers/x"]`,
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("statement lacks %q:\n%s", want, sql)
		}
	}
	for _, gone := range []string{":k", ":a ", "\\set", "-- ", ";"} {
		if strings.Contains(sql, gone) {
			t.Errorf("statement still has %q:\n%s", gone, sql)
		}
	}
	if _, err := pgbenchStatement("SELECT :k;\nSELECT :a;"); err == nil {
		t.Error("two statements: no error")
	}
}

// The SQLite bound server writes what the one statement writes, running
// totals included, and a batch that fails leaves nothing behind.
func TestSQLiteBound(t *testing.T) {
	ctx := t.Context()
	b, err := openSQLiteBound(ctx, filepath.Join(t.TempDir(), "bound.db"), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	batch := func(ts ...transfer) error { return b.commit(ts) }
	if err := batch(transfer{k: 1, a: 1, b: 2}, transfer{k: 2, a: 1, b: 3}); err != nil {
		t.Fatal(err)
	}
	if err := batch(transfer{k: 3, a: 2, b: 3}); err != nil {
		t.Fatal(err)
	}
	// acc-9 does not exist: the batch fails, its first transfer with it.
	if err := batch(transfer{k: 4, a: 1, b: 2}, transfer{k: 5, a: 1, b: 9}); err == nil {
		t.Fatal("a transfer to a missing account: no error")
	}

	count := func(table string) (n int) {
		if err := b.conn.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for table, want := range map[string]int{"idem_keys": 3, "ledger_transfers": 3, "ledger_entries": 6, "idem_outbox": 3} {
		if got := count(table); got != want {
			t.Errorf("%s: %d rows, want %d", table, got, want)
		}
	}
	for _, want := range []struct {
		id                 string
		debits, credits, n int64
	}{{"acc-1", 200, 0, 2}, {"acc-2", 100, 100, 2}, {"acc-3", 0, 200, 2}} {
		var d, c, n int64
		if err := b.conn.QueryRowContext(ctx, `SELECT debits_posted, credits_posted, sequence
			FROM ledger_accounts WHERE tenant = 'bench' AND id = ?`, want.id).Scan(&d, &c, &n); err != nil {
			t.Fatal(err)
		}
		if d != want.debits || c != want.credits || n != want.n {
			t.Errorf("%s: debits %d credits %d sequence %d, want %d %d %d", want.id, d, c, n, want.debits, want.credits, want.n)
		}
	}
	// acc-2's entries: credited by one-1, then debited by one-3, each
	// carrying the totals after it.
	rows, err := b.conn.QueryContext(ctx, `SELECT sequence, transfer_id, credit, debits_posted, credits_posted
		FROM ledger_entries WHERE account_id = 'acc-2' ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var seq, credit, d, c int64
		var id string
		if err := rows.Scan(&seq, &id, &credit, &d, &c); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d %s %d %d %d", seq, id, credit, d, c))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"1 one-1 1 0 100", "2 one-3 0 100 100"}; !slices.Equal(got, want) {
		t.Errorf("acc-2's entries %q, want %q", got, want)
	}
}

// With idem's work the SQLite bound claims each request's key before the
// transfers and stores its answer after them; a key claimed before fails
// its whole batch, which leaves nothing behind.
func TestSQLiteBoundIdemWork(t *testing.T) {
	ctx := t.Context()
	b, err := openSQLiteBound(ctx, filepath.Join(t.TempDir(), "bound.db"), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	b.idemWork = true
	if err := b.commit([]transfer{{k: 1, a: 1, b: 2, key: "k1"}, {k: 2, a: 2, b: 3, key: "k2"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.commit([]transfer{{k: 3, a: 1, b: 2, key: "k3"}, {k: 4, a: 1, b: 2, key: "k1"}}); err == nil {
		t.Fatal("a key claimed before: no error")
	}
	rows, err := b.conn.QueryContext(ctx, `SELECT key, status, body FROM idem_keys ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var key string
		var status int
		var body []byte
		if err := rows.Scan(&key, &status, &body); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %d %v", key, status, string(body) == string(boundAnswer)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"k1 201 true", "k2 201 true"}; !slices.Equal(got, want) {
		t.Errorf("keys %q, want %q", got, want)
	}
	var transfers int
	if err := b.conn.QueryRowContext(ctx, `SELECT count(*) FROM ledger_transfers`).Scan(&transfers); err != nil || transfers != 2 {
		t.Errorf("%d transfers (%v), want 2", transfers, err)
	}
}

// With idem's work the bound decodes as idem does: a transfer's body
// passes; a duplicate name, an unknown field and a text that is not JSON
// are refused. Without it, only what is not JSON is.
func TestBoundDecode(t *testing.T) {
	for _, c := range []struct {
		body        string
		strict, lax bool
	}{
		{string(transferBody(1, 2)), true, true},
		{`{"debit_account_id":"acc-1","debit_account_id":"acc-2"}`, false, true},
		{`{"debit_account_id":"acc-1","extra":1}`, false, true},
		{`{"debit_account_id":`, false, false},
	} {
		for _, strict := range []bool{true, false} {
			r := httptest.NewRequest(http.MethodPost, "/v1/transfers", strings.NewReader(c.body))
			var v struct {
				ID       string `json:"id"`
				Debit    string `json:"debit_account_id"`
				Credit   string `json:"credit_account_id"`
				Amount   int64  `json:"amount"`
				Currency string `json:"currency"`
			}
			want := c.lax
			if strict {
				want = c.strict
			}
			if err := decode(r, &v, strict); (err == nil) != want {
				t.Errorf("%s (strict %v): %v, want accepted %v", c.body, strict, err, want)
			}
		}
	}
}
