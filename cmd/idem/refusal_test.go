package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/netfault"
	"github.com/idemhq/idem/internal/testpg"
)

// A database that takes no writes (a standby as the only host) or no more
// connections: idem keeps no connection it cannot write through, answers
// requests 503 by their deadline, says why in /readyz and once in its log,
// and recovers when the database does. A serve started on a standby
// refuses to start, saying so.
func TestDatabaseRefusals(t *testing.T) {
	t.Parallel()
	pg := testpg.NewCluster(t)
	pg.Exec(t, `CREATE ROLE ro LOGIN SUPERUSER`, `CREATE ROLE lim LOGIN`, `CREATE DATABASE limdb OWNER lim`)
	as := func(user, db string) string {
		u, err := url.Parse(pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		u.User, u.Path = url.User(user), "/"+db
		return u.String()
	}
	for _, c := range []struct {
		name, user, db   string
		refuse, allow    string // statements that make the database refuse the user, and take it back
		reason, startErr string
	}{
		{"standby", "ro", "postgres",
			`ALTER ROLE ro SET default_transaction_read_only = on`, `ALTER ROLE ro RESET default_transaction_read_only`,
			"database read-only", "read-only"},
		{"connections", "lim", "limdb",
			`ALTER ROLE lim CONNECTION LIMIT 0`, `ALTER ROLE lim CONNECTION LIMIT -1`,
			"database refuses connections: too many", "too many connections"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := as(c.user, c.db)
			p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--db-timeout", "1s", "--relay-lease", "3s")
			u := p.URL
			account(t, u, "a", "EUR")
			account(t, u, "b", "EUR")

			pg.Exec(t, c.refuse, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '`+c.user+`'`)
			var body map[string]any
			waitFor(t, func() bool {
				r := call(t, "GET", u+"/readyz", "", nil)
				_ = json.Unmarshal(r.Body, &body)
				return r.Status == http.StatusServiceUnavailable && body["reason"] == c.reason
			})
			r := call(t, "POST", u+"/v1/transfers", c.name+"-1", transferBody("t1"))
			if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
				t.Fatalf("a transfer while the database refuses: %d %v %s", r.Status, r.Header, r.Body)
			}
			if n := strings.Count(p.Stderr(), "not ready: "+c.reason); n != 1 {
				t.Fatalf("%q logged %d times, want once:\n%s", c.reason, n, p.Stderr())
			}
			// A serve started now refuses to, saying why.
			second := launch(t, false, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--db-timeout", "1s")
			if err := second.wait(30 * time.Second); err == nil || !strings.Contains(second.Stderr(), c.startErr) {
				t.Fatalf("serve on a database that refuses: %v\n%s", err, second.Stderr())
			}

			pg.Exec(t, c.allow)
			waitFor(t, func() bool { return call(t, "GET", u+"/readyz", "", nil).Status == http.StatusOK })
			mustStatus(t, call(t, "POST", u+"/v1/transfers", c.name+"-1", transferBody("t1")), http.StatusCreated)
			if b := call(t, "GET", u+"/v1/accounts/b", "", nil).json(t); b["credits_posted"] != float64(1) {
				t.Fatalf("b credited %v for one transfer", b["credits_posted"])
			}
		})
	}
}

// A multi-host URL whose first host never answers (a blackhole): each
// connection gives up on it after --db-connect-timeout and takes the
// next, and the service works.
func TestMultiHostDeadHost(t *testing.T) {
	t.Parallel()
	good, err := url.Parse(drivertest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	dead, err := netfault.Start(good.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	dead.Blackhole()
	multi := *good
	multi.Host = dead.Addr() + "," + good.Host
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", multi.String(), "--db-connect-timeout", "2s")
	u := p.URL
	account(t, u, "a", "EUR")
	account(t, u, "b", "EUR")
	for i := range 3 {
		mustStatus(t, call(t, "POST", u+"/v1/transfers", fmt.Sprintf("multi-%d", i), transferBody(fmt.Sprintf("t%d", i))), http.StatusCreated)
	}
	if b := call(t, "GET", u+"/v1/accounts/b", "", nil).json(t); b["credits_posted"] != float64(3) {
		t.Fatalf("b credited %v for three transfers", b["credits_posted"])
	}
	mustStatus(t, call(t, "GET", u+"/readyz", "", nil), http.StatusOK)
}

func transferBody(id string) map[string]any {
	return map[string]any{"id": id, "debit_account_id": "a", "credit_account_id": "b", "amount": 1, "currency": "EUR"}
}
