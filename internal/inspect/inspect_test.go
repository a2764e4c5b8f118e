package inspect_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/ledger"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakcheck.Wrap(m))) }

// store runs one request through a real keeper, so the record is exactly
// what the service would have stored.
func store(t *testing.T, k *idem.Keeper, tenant, op, key string, body string, status int, answer string) {
	t.Helper()
	_, err := k.Do(context.Background(), idem.Request{Key: idem.Key{Scope: tenant, Operation: op, Key: key}, Body: []byte(body)},
		func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			return idem.Outcome{Status: status, Body: []byte(answer)}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		now := time.Date(2026, 11, 29, 14, 2, 0, 0, time.UTC)
		k, err := idem.New(d, idem.Config{Retention: time.Hour, Clock: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		store(t, k, "acme", "POST /v1/transfers", "k-1", `{"amount":500}`, 201, `{"id":"t-1"}`)
		store(t, k, "acme", "POST /v1/accounts", "k-1", `{"currency":"EUR"}`, 422, "not json")
		store(t, k, "acme", "POST /v1/transfers", "k-2", `{"amount":1}`, 201, `{}`)
		store(t, k, "globex", "POST /v1/transfers", "k-1", `{"amount":9}`, 201, `{}`)
		// Many operations without the key: the walk passes them by.
		for i := range 20 {
			store(t, k, "acme", fmt.Sprintf("POST /v1/op%02d", i), "other", `{}`, 200, `{}`)
		}

		all, err := inspect.Keys(ctx, d, now, "acme", "", "k-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2 || all[0].Operation != "POST /v1/accounts" || all[1].Operation != "POST /v1/transfers" {
			t.Fatalf("records %+v", all)
		}
		tr := all[1]
		fp, _ := idem.Fingerprint("POST /v1/transfers", []byte(`{"amount":500}`))
		if tr.Tenant != "acme" || tr.Key != "k-1" || tr.Status != 201 || string(tr.Body) != `{"id":"t-1"}` ||
			tr.Fingerprint != hex.EncodeToString(fp) || !tr.FirstSeen.Equal(now) || !tr.ExpiresAt.Equal(now.Add(time.Hour)) || tr.Expired {
			t.Fatalf("transfer record %+v", tr)
		}
		if all[0].BodyText() != "not json" || string(all[0].Body) != `"not json"` {
			t.Fatalf("a non-JSON body: %s / %q", all[0].Body, all[0].BodyText())
		}

		one, err := inspect.Keys(ctx, d, now, "acme", "POST /v1/transfers", "k-1")
		if err != nil || len(one) != 1 || one[0].Status != 201 {
			t.Fatalf("one operation: %+v %v", one, err)
		}
		none, err := inspect.Keys(ctx, d, now, "acme", "POST /v1/nothing", "k-1")
		if err != nil || len(none) != 0 {
			t.Fatalf("unknown operation: %+v %v", none, err)
		}
		// Another tenant's key of the same name is its own.
		g, err := inspect.Keys(ctx, d, now, "globex", "", "k-1")
		if err != nil || len(g) != 1 || g[0].Tenant != "globex" {
			t.Fatalf("globex: %+v %v", g, err)
		}
		if n, _ := inspect.Keys(ctx, d, now, "initech", "", "k-1"); len(n) != 0 {
			t.Fatalf("a tenant with no keys: %+v", n)
		}
		// Past its retention the record is marked expired.
		later, err := inspect.Keys(ctx, d, now.Add(2*time.Hour), "acme", "", "k-1")
		if err != nil || !later[0].Expired {
			t.Fatalf("expired: %+v %v", later, err)
		}

		var out bytes.Buffer
		if err := inspect.WriteKeys(&out, "acme", "k-1", all, now); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"operation    POST /v1/transfers", "status       201", `body         {"id":"t-1"}`, tr.Fingerprint, "live"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, out.String())
			}
		}
	})
}

func TestBalanceAndVerify(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		l, err := ledger.New(d, ledger.Config{})
		if err != nil {
			t.Fatal(err)
		}
		inTx := func(fn func(tx driver.Tx) error) {
			t.Helper()
			tx, err := d.Begin(ctx, driver.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if err := fn(tx); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var first ledger.Transfer
		inTx(func(tx driver.Tx) error {
			for _, id := range []string{"a", "b"} {
				if _, err := l.CreateAccount(ctx, tx, "acme", ledger.NewAccount{ID: id, Currency: "EUR"}); err != nil {
					return err
				}
			}
			ts, err := l.Post(ctx, tx, "acme", ledger.NewTransfer{ID: "t1", DebitAccountID: "a", CreditAccountID: "b", Amount: 300, Currency: "EUR"})
			first = ts[0]
			return err
		})
		inTx(func(tx driver.Tx) error {
			_, err := l.Post(ctx, tx, "acme", ledger.NewTransfer{ID: "t2", DebitAccountID: "a", CreditAccountID: "b", Amount: 200, Currency: "EUR"})
			return err
		})
		now, err := inspect.AccountBalance(ctx, d, l, "acme", "b", nil)
		if err != nil || now.Believed.Balance != 500 || now.Account.Currency != "EUR" {
			t.Fatalf("now: %+v %v", now, err)
		}
		then, err := inspect.AccountBalance(ctx, d, l, "acme", "b", &first.CreatedAt)
		if err != nil || then.Believed.Balance != 300 {
			t.Fatalf("as of the first transfer: %+v %v", then, err)
		}
		// A moment after the newest entry is read again in a read-write
		// transaction (the snapshot cannot wait for writers).
		recent := time.Now()
		if b, err := inspect.AccountBalance(ctx, d, l, "acme", "b", &recent); err != nil || b.Believed.Balance != 500 || !b.Believed.AsOf.Equal(recent) {
			t.Fatalf("as of now, explicitly: %+v %v", b, err)
		}
		var zero time.Time
		if b, err := inspect.AccountBalance(ctx, d, l, "acme", "b", &zero); err != nil || b.Believed.Balance != 0 || b.Believed.CreditsPosted != 0 {
			t.Fatalf("as of the zero time: %+v %v", b, err)
		}
		if _, err := inspect.AccountBalance(ctx, d, l, "globex", "b", nil); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("another tenant's account: %v", err)
		}
		var out bytes.Buffer
		if err := inspect.WriteBalance(&out, then, nil); err != nil || !strings.Contains(out.String(), "balance         3.00 EUR (300)") {
			t.Fatalf("balance table %v:\n%s", err, out.String())
		}

		report, err := inspect.NewVerifyReport(inspect.Verify(ctx, d))
		if err != nil || !report.OK {
			t.Fatalf("a sound ledger: %+v %v", report, err)
		}
		// Corrupt an account's cached totals behind the ledger's back (the
		// one table that is not append-only): verify must say so.
		corruptAccount(t, d, "acme", "b")
		report, err = inspect.NewVerifyReport(inspect.Verify(ctx, d))
		if err != nil || report.OK || len(report.Violations) == 0 {
			t.Fatalf("a corrupted ledger: %+v %v", report, err)
		}
		out.Reset()
		_ = inspect.WriteVerify(&out, report)
		if !strings.Contains(out.String(), "ledger BROKEN") {
			t.Fatalf("verify text:\n%s", out.String())
		}
	})
}

// corruptAccount moves an account's cached credits, as a bad manual fix
// would.
func corruptAccount(t *testing.T, d driver.Driver, tenant, id string) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	n, err := tx.Exec(ctx, `UPDATE ledger_accounts SET credits_posted = credits_posted + 1 WHERE tenant = $1 AND id = $2`, tenant, id)
	if err != nil || n != 1 {
		t.Fatalf("corrupt: %d %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOutboxFormat(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 14, 2, 0, 0, time.UTC)
	var out bytes.Buffer
	_ = inspect.WriteOutboxStats(&out, inspect.OutboxStats{Pending: 3, OldestPendingAt: now.Add(-95 * time.Second), Dead: 1}, now)
	for _, want := range []string{"pending         3", "(1m35s old)", "dead letters    1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stats lack %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	_ = inspect.WriteDeadLetters(&out, []inspect.DeadLetter{{ID: "m1", Tenant: "acme", Type: "transfer.created", Attempts: 9,
		LastError: "line one\nline\ttwo", DeadAt: now}})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "line one line two") {
		t.Fatalf("dead letters table:\n%s", out.String())
	}
	var js bytes.Buffer
	_ = inspect.WriteJSON(&js, inspect.OutboxStats{})
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil || m["oldest_pending_at"] != nil {
		t.Fatalf("empty stats JSON %s", js.String())
	}
}

// TestRunOutboxArguments checks that bad arguments are refused before the
// database is opened. The view itself is tested with the outbox package's
// real implementation.
func TestRunOutboxArguments(t *testing.T) {
	t.Parallel()
	open := func(ctx context.Context, db, configFile string) (inspect.OutboxView, func(), error) {
		t.Error("the database was opened for bad arguments")
		return nil, func() {}, errors.New("not opened")
	}
	for _, args := range [][]string{nil, {"purge"}, {"stats", "extra"}, {"list"}, {"list", "--dead", "--limit", "0"},
		{"list", "--dead", "--limit", "5000"}, {"redrive"}, {"redrive", "a", "b"}, {"stats", "--bogus"}} {
		var out, errOut bytes.Buffer
		if err := inspect.RunOutbox(context.Background(), args, open, time.Now(), &out, &errOut); err == nil {
			t.Errorf("outbox %v: no error", args)
		}
	}
}
