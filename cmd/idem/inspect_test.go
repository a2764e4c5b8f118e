package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/storage"
)

// runIdem runs the built binary to completion in a directory of its own
// and returns its stdout, stderr and exit code.
func runIdem(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runIdemIn(t, t.TempDir(), env, args...)
}

// runIdemIn is runIdem in the directory dir.
func runIdemIn(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("idem %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// TestInspectCommands answers "I was charged twice" from the command line,
// against the database a real serve wrote, on both databases.
func TestInspectCommands(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, db := serveDB(t, dialect, nil)
		u := p.URL
		mustStatus(t, call(t, "POST", u+"/v1/accounts", "a-bank", `{"id":"bank","currency":"EUR"}`), 201)
		mustStatus(t, call(t, "POST", u+"/v1/accounts", "a-wallet", `{"id":"wallet","currency":"EUR"}`), 201)
		mustStatus(t, call(t, "POST", u+"/v1/transfers", "fund", `{"debit_account_id":"bank","credit_account_id":"wallet","amount":2000,"currency":"EUR"}`), 201)
		charge := `{"debit_account_id":"wallet","credit_account_id":"bank","amount":500,"currency":"EUR"}`
		first := call(t, "POST", u+"/v1/transfers", "charge-1", charge)
		mustStatus(t, first, 201)
		dup := call(t, "POST", u+"/v1/transfers", "charge-1b", charge)
		mustStatus(t, dup, 201)
		dupID := dup.json(t)["id"].(string)
		mustStatus(t, call(t, "POST", u+"/v1/transfers/"+dupID+"/reversals", "refund-1", `{"reason":"charged twice"}`), 201)
		dupAt := dup.json(t)["created_at"].(string)

		// keys get: a table, and JSON for scripts.
		out, stderr, code := runIdem(t, nil, "keys", "get", "--db", db, "--tenant", "default", "charge-1")
		if code != 0 || !strings.Contains(out, "POST /v1/transfers") || !strings.Contains(out, "201") ||
			!strings.Contains(out, first.json(t)["id"].(string)) {
			t.Fatalf("keys get (%d): %s%s", code, out, stderr)
		}
		// IDEM_DB like serve; flags after the key.
		out, stderr, code = runIdem(t, []string{"IDEM_DB=" + db}, "keys", "get", "charge-1", "--json", "--operation", "POST /v1/transfers")
		var recs []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 {
			t.Fatalf("keys get --json (%d): %s%s", code, out, stderr)
		}
		if body, _ := recs[0]["body"].(map[string]any); recs[0]["status"] != float64(201) || body["id"] != first.json(t)["id"] ||
			len(recs[0]["fingerprint"].(string)) != 64 || recs[0]["expired"] != false {
			t.Fatalf("record %v", recs[0])
		}
		out, _, code = runIdem(t, nil, "keys", "get", "--db", db, "--tenant", "acme", "charge-1")
		if code != 0 || !strings.Contains(out, "no record") {
			t.Fatalf("another tenant's key (%d): %s", code, out)
		}

		// ledger balance, now and before the reversal.
		out, stderr, code = runIdem(t, nil, "ledger", "balance", "--db", db, "--json", "wallet")
		var b struct {
			Balance struct{ Balance int64 } `json:"balance"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &b) != nil || b.Balance.Balance != 1500 {
			t.Fatalf("balance now (%d): %s%s", code, out, stderr)
		}
		out, stderr, code = runIdem(t, nil, "ledger", "balance", "--db", db, "--as-of", dupAt, "wallet")
		if code != 0 || !strings.Contains(out, "balance         10.00 EUR (1000)") {
			t.Fatalf("balance as of the duplicate (%d): %s%s", code, out, stderr)
		}
		out, stderr, code = runIdem(t, []string{"IDEM_CURRENCY_EXPONENTS=EUR=3"}, "ledger", "balance", "--db", db, "wallet")
		if code != 0 || !strings.Contains(out, "balance         1.500 EUR (1500)") {
			t.Fatalf("balance with a configured exponent (%d): %s%s", code, out, stderr)
		}
		// Without a zone the moment is UTC, as in the console
		// (inspect.ParseMoment).
		if !strings.HasSuffix(dupAt, "Z") {
			t.Fatalf("created_at %q is not in UTC", dupAt)
		}
		out, stderr, code = runIdem(t, nil, "ledger", "balance", "--db", db, "--as-of", strings.TrimSuffix(dupAt, "Z"), "wallet")
		if code != 0 || !strings.Contains(out, "balance         10.00 EUR (1000)") {
			t.Fatalf("balance as of the duplicate, without a zone (%d): %s%s", code, out, stderr)
		}
		if _, stderr, code = runIdem(t, nil, "ledger", "balance", "--db", db, "nobody"); code == 0 || !strings.Contains(stderr, "no account") {
			t.Fatalf("missing account (%d): %s", code, stderr)
		}
		if _, stderr, code = runIdem(t, nil, "ledger", "balance", "--db", db, "--as-of", "14:02", "wallet"); code == 0 || !strings.Contains(stderr, "RFC 3339") {
			t.Fatalf("bad --as-of (%d): %s", code, stderr)
		}

		// ledger verify: sound, then broken behind the ledger's back.
		out, _, code = runIdem(t, nil, "ledger", "verify", "--db", db)
		if code != 0 || !strings.Contains(out, "ledger OK") {
			t.Fatalf("verify (%d): %s", code, out)
		}
		corrupt(t, db)
		out, _, code = runIdem(t, nil, "ledger", "verify", "--db", db, "--json")
		var report struct {
			OK         bool
			Violations []string
		}
		if code == 0 || json.Unmarshal([]byte(out), &report) != nil || report.OK || len(report.Violations) == 0 {
			t.Fatalf("verify of a broken ledger (%d): %s", code, out)
		}

		for _, args := range [][]string{{"keys"}, {"keys", "get", "--db", db}, {"ledger"}, {"ledger", "balance", "--db", db}, {"ledger", "verify", "--db", db, "extra"}} {
			if _, _, code := runIdem(t, nil, args...); code == 0 {
				t.Errorf("idem %v exited 0", args)
			}
		}
	})
}

// corrupt moves an account's cached total, as a bad manual fix would.
func corrupt(t *testing.T, db string) {
	t.Helper()
	ctx := context.Background()
	d, err := storage.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if n, err := tx.Exec(ctx, `UPDATE ledger_accounts SET debits_posted = debits_posted + 7 WHERE id = $1`, "wallet"); err != nil || n != 1 {
		t.Fatalf("corrupt: %d %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
