package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// eachDialect runs fn against a fresh idem serve on SQLite and on Postgres.
func eachDialect(t *testing.T, fn func(t *testing.T, dialect string)) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			fn(t, dialect)
		})
	}
}

func account(t *testing.T, url, id, currency string, flags ...string) {
	t.Helper()
	body := map[string]any{"id": id, "currency": currency}
	if len(flags) > 0 {
		f := map[string]bool{}
		for _, name := range flags {
			f[name] = true
		}
		body["flags"] = f
	}
	mustStatus(t, call(t, "POST", url+"/v1/accounts", "acct-"+id, body), http.StatusCreated)
}

func transfer(debit, credit string, amount int64) map[string]any {
	return map[string]any{"debit_account_id": debit, "credit_account_id": credit, "amount": amount, "currency": "EUR"}
}

// Every row of the contract's Idempotency-Key table, over HTTP against the
// built binary, on both databases.
func TestContract(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, _ := serveDB(t, dialect, nil)
		u := p.URL
		account(t, u, "alice", "EUR")
		account(t, u, "bob", "EUR")

		// First arrival: the handler's status and body.
		first := call(t, "POST", u+"/v1/transfers", "pay-1", transfer("alice", "bob", 1250))
		mustStatus(t, first, http.StatusCreated)
		if first.Header.Get("Idempotent-Replayed") != "" {
			t.Fatal("first arrival marked replayed")
		}
		tr := first.json(t)
		if tr["amount"] != float64(1250) || tr["id"] == "" || tr["created_at"] == nil {
			t.Fatalf("transfer body %s", first.Body)
		}

		// Completed duplicate: same status and body, marked replayed.
		again := call(t, "POST", u+"/v1/transfers", "pay-1", transfer("alice", "bob", 1250))
		mustStatus(t, again, http.StatusCreated)
		if !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay differs:\n%s\n%s\n%v", first.Body, again.Body, again.Header)
		}
		// The same payload in another key order is the same request.
		reordered := `{"currency":"EUR","amount":1250,"credit_account_id":"bob","debit_account_id":"alice"}`
		if r := call(t, "POST", u+"/v1/transfers", "pay-1", reordered); !bytes.Equal(r.Body, first.Body) {
			t.Fatalf("canonical twin not replayed: %d %s", r.Status, r.Body)
		}

		// Missing key, bad keys.
		if r := call(t, "POST", u+"/v1/transfers", "", transfer("alice", "bob", 1)); r.Status != 400 || r.code(t) != "idempotency_key_missing" {
			t.Fatalf("missing key: %d %s", r.Status, r.Body)
		}
		for _, bad := range []string{strings.Repeat("k", 256), `"unterminated`, "has space"} {
			if r := call(t, "POST", u+"/v1/transfers", bad, transfer("alice", "bob", 1)); r.Status != 400 || r.code(t) != "idempotency_key_invalid" {
				t.Fatalf("key %q: %d %s", bad, r.Status, r.Body)
			}
		}
		// The quoted form names the same key as the bare one.
		if r := call(t, "POST", u+"/v1/transfers", `"pay-1"`, transfer("alice", "bob", 1250)); r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("quoted key not replayed: %d %s", r.Status, r.Body)
		}

		// Same key, different payload.
		if r := call(t, "POST", u+"/v1/transfers", "pay-1", transfer("alice", "bob", 999)); r.Status != 422 || r.code(t) != "idempotency_key_reused" {
			t.Fatalf("reused key: %d %s", r.Status, r.Body)
		}

		// Exactly one transfer moved money, once.
		acct := call(t, "GET", u+"/v1/accounts/bob", "", nil)
		mustStatus(t, acct, 200)
		if b := acct.json(t); b["credits_posted"] != float64(1250) || b["balance"] != float64(1250) {
			t.Fatalf("bob after duplicates: %s", acct.Body)
		}
		entries := call(t, "GET", u+"/v1/accounts/alice/entries", "", nil)
		if d, _ := entries.json(t)["data"].([]any); len(d) != 1 {
			t.Fatalf("alice has %d entries, want 1: %s", len(d), entries.Body)
		}

		// Business refusals are answers: stored and replayed, not retried.
		account(t, u, "wallet", "EUR", "debits_must_not_exceed_credits")
		over := call(t, "POST", u+"/v1/transfers", "over-1", transfer("wallet", "bob", 5))
		if over.Status != 422 || over.code(t) != "insufficient_funds" {
			t.Fatalf("overdraft: %d %s", over.Status, over.Body)
		}
		overAgain := call(t, "POST", u+"/v1/transfers", "over-1", transfer("wallet", "bob", 5))
		if !bytes.Equal(overAgain.Body, over.Body) || overAgain.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("refusal not replayed: %s", overAgain.Body)
		}
	})
}

// Business rules, bad bodies and missing resources answer with their
// stable codes, and write nothing.
func TestErrorCodes(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, _ := serveDB(t, dialect, nil)
		u := p.URL
		account(t, u, "eur1", "EUR")
		account(t, u, "eur2", "EUR")
		account(t, u, "usd1", "USD")
		cases := []struct {
			name   string
			path   string
			body   any
			status int
			code   string
		}{
			{"unknown account", "/v1/transfers", transfer("eur1", "nobody", 1), 422, "account_not_found"},
			{"currency mismatch", "/v1/transfers", map[string]any{"debit_account_id": "eur1", "credit_account_id": "usd1", "amount": 1, "currency": "EUR"}, 422, "currency_mismatch"},
			{"same account", "/v1/transfers", transfer("eur1", "eur1", 1), 422, "same_account"},
			{"zero amount", "/v1/transfers", transfer("eur1", "eur2", 0), 400, "invalid_request"},
			{"negative amount", "/v1/transfers", transfer("eur1", "eur2", -5), 400, "invalid_request"},
			{"fractional amount", "/v1/transfers", `{"debit_account_id":"eur1","credit_account_id":"eur2","amount":1.5,"currency":"EUR"}`, 400, "invalid_request"},
			{"malformed JSON", "/v1/transfers", `{"amount":`, 400, "invalid_request"},
			{"unknown field", "/v1/transfers", `{"debit_account_id":"eur1","credit_account_id":"eur2","amount":1,"currency":"EUR","colour":"red"}`, 400, "invalid_request"},
			{"reverse missing transfer", "/v1/transfers/nope/reversals", map[string]any{}, 404, "not_found"},
			{"account without currency", "/v1/accounts", map[string]any{"id": "x"}, 400, "invalid_request"},
		}
		for i, c := range cases {
			r := call(t, "POST", u+c.path, fmt.Sprintf("err-%d", i), c.body)
			if r.Status != c.status || r.code(t) != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.name, r.Status, r.Body, c.status, c.code)
			}
		}
		for _, path := range []string{"/v1/accounts/ghost", "/v1/accounts/ghost/balance", "/v1/accounts/ghost/entries", "/v1/transfers/ghost"} {
			if r := call(t, "GET", u+path, "", nil); r.Status != 404 || r.code(t) != "not_found" {
				t.Errorf("GET %s: %d %s", path, r.Status, r.Body)
			}
		}
		if r := call(t, "GET", u+"/v1/accounts/eur1/balance?as_of=yesterday", "", nil); r.Status != 400 || r.code(t) != "invalid_request" {
			t.Errorf("bad as_of: %d %s", r.Status, r.Body)
		}
		if r := call(t, "GET", u+"/v1/accounts/eur1/entries?limit=5000", "", nil); r.Status != 400 {
			t.Errorf("limit over 1000: %d %s", r.Status, r.Body)
		}
		// Nothing moved.
		for _, id := range []string{"eur1", "eur2", "usd1"} {
			if b := call(t, "GET", u+"/v1/accounts/"+id, "", nil).json(t); b["debits_posted"] != float64(0) || b["credits_posted"] != float64(0) {
				t.Errorf("%s moved: %v", id, b)
			}
		}
		// Oversized bodies are refused before they are read whole.
		big := `{"id":"big","currency":"EUR","metadata":{"pad":"` + strings.Repeat("x", 2<<20) + `"}}`
		if r := call(t, "POST", u+"/v1/accounts", "big-1", big); r.Status != 413 {
			t.Errorf("2 MiB body: %d %s", r.Status, r.Body)
		}
		if r := call(t, "GET", u+"/v1/accounts/big", "", nil); r.Status != 404 {
			t.Errorf("oversized request created an account: %d", r.Status)
		}
	})
}

// 200 concurrent identical POSTs: one transfer, 200 identical bodies.
func TestConcurrentIdenticalPosts(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, _ := serveDB(t, dialect, nil)
		account(t, p.URL, "a", "EUR")
		account(t, p.URL, "b", "EUR")
		storm(t, []string{p.URL}, 200)
		if b := call(t, "GET", p.URL+"/v1/accounts/b", "", nil).json(t); b["credits_posted"] != float64(700) {
			t.Fatalf("b after 200 copies: %v", b)
		}
	})
}

// The same storm spread over two processes on one Postgres: a duplicate
// sent to the other process replays too.
func TestConcurrentPostsTwoProcesses(t *testing.T) {
	db := dbURL(t, "postgres")
	p1 := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db)
	p2 := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db)
	account(t, p1.URL, "a", "EUR")
	account(t, p2.URL, "b", "EUR")
	storm(t, []string{p1.URL, p2.URL}, 200)
	for _, u := range []string{p1.URL, p2.URL} {
		if b := call(t, "GET", u+"/v1/accounts/b", "", nil).json(t); b["credits_posted"] != float64(700) {
			t.Fatalf("b after 200 copies over two processes: %v", b)
		}
	}
}

// storm sends n copies of one transfer at once, spread over urls, and
// checks that all answers are one identical 201.
func storm(t *testing.T, urls []string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	answers := make([]response, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = call(t, "POST", urls[i%len(urls)]+"/v1/transfers", "storm-1", transfer("a", "b", 700))
		}()
	}
	close(start)
	wg.Wait()
	replayed := 0
	for i, a := range answers {
		if a.Status != 201 || !bytes.Equal(a.Body, answers[0].Body) {
			t.Fatalf("copy %d: %d %s (copy 0: %s)", i, a.Status, a.Body, answers[0].Body)
		}
		if a.Header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	if replayed != n-1 {
		t.Fatalf("%d of %d copies replayed, want %d", replayed, n, n-1)
	}
}

// A twin that arrives while the first copy is stuck past the wait gets 409
// with Retry-After; once the first is gone, the key is free and works.
func TestInFlight(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		db := dbURL(t, dialect)
		plain := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db)
		account(t, plain.URL, "a", "EUR")
		account(t, plain.URL, "b", "EUR")
		plain.signal(syscall.SIGTERM)
		if err := plain.wait(30 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
		// This process stops every claimed request just before its commit.
		stuck := start(t, []string{"IDEM_FAILPOINT=keeper.before_commit"},
			"serve", "--addr", "127.0.0.1:0", "--db", db, "--in-flight-wait", "300ms")
		go func() {
			// Never answered: the process is killed at the end of the test.
			req, _ := http.NewRequest("POST", stuck.URL+"/v1/transfers", strings.NewReader(`{"debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR"}`))
			req.Header.Set("Idempotency-Key", "stuck-1")
			if resp, err := (&http.Client{Timeout: time.Minute}).Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		waitFor(t, func() bool { return strings.Contains(stuck.Stderr(), "failpoint: keeper.before_commit") })
		twin := call(t, "POST", stuck.URL+"/v1/transfers", "stuck-1", transfer("a", "b", 5))
		if twin.Status != 409 || twin.code(t) != "request_in_flight" || twin.Header.Get("Retry-After") == "" {
			t.Fatalf("twin in flight: %d %v %s", twin.Status, twin.Header, twin.Body)
		}
		stuck.cmd.Process.Kill()
		stuck.wait(30 * time.Second)
		// The killed copy committed nothing: a retry does the work, once.
		after := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db)
		retry := call(t, "POST", after.URL+"/v1/transfers", "stuck-1", transfer("a", "b", 5))
		mustStatus(t, retry, 201)
		if retry.Header.Get("Idempotent-Replayed") != "" {
			t.Fatal("retry after the killed copy was a replay of nothing")
		}
		if b := call(t, "GET", after.URL+"/v1/accounts/b", "", nil).json(t); b["credits_posted"] != float64(5) {
			t.Fatalf("b: %v", b)
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Tenants come from API keys: keys, accounts and transfers of one tenant are
// invisible to another.
func TestTenantIsolation(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		const keyA, keyB = "tenant-a-secret-0001", "tenant-b-secret-0002"
		p, _ := serveDB(t, dialect, []string{"IDEM_API_KEYS=acme:" + keyA + ",globex:" + keyB})
		u := p.URL
		asA := []string{"Authorization", "Bearer " + keyA}
		asB := []string{"Authorization", "Bearer " + keyB}

		if r := call(t, "GET", u+"/v1/accounts/x", "", nil); r.Status != 401 || r.code(t) != "unauthorized" {
			t.Fatalf("no key: %d %s", r.Status, r.Body)
		}
		if r := call(t, "GET", u+"/v1/accounts/x", "", nil, "Authorization", "Bearer wrong-key-000000000"); r.Status != 401 {
			t.Fatalf("wrong key: %d", r.Status)
		}
		for _, id := range []string{"a1", "a2"} {
			mustStatus(t, call(t, "POST", u+"/v1/accounts", "acct-"+id, map[string]any{"id": id, "currency": "EUR"}, asA...), 201)
		}
		ta := call(t, "POST", u+"/v1/transfers", "same-key", transfer("a1", "a2", 10), asA...)
		mustStatus(t, ta, 201)
		trID := ta.json(t)["id"].(string)

		// B sees none of A's resources…
		for _, path := range []string{"/v1/accounts/a1", "/v1/accounts/a1/balance", "/v1/accounts/a1/entries", "/v1/transfers/" + trID} {
			if r := call(t, "GET", u+path, "", nil, asB...); r.Status != 404 {
				t.Fatalf("B GET %s: %d %s", path, r.Status, r.Body)
			}
		}
		if r := call(t, "POST", u+"/v1/transfers/"+trID+"/reversals", "rev-b", map[string]any{}, asB...); r.Status != 404 {
			t.Fatalf("B reverses A's transfer: %d %s", r.Status, r.Body)
		}
		// …and A's idempotency key is B's own: no replay of A's answer.
		mustStatus(t, call(t, "POST", u+"/v1/accounts", "acct-a1", map[string]any{"id": "a1", "currency": "USD"}, asB...), 201)
		mustStatus(t, call(t, "POST", u+"/v1/accounts", "acct-b2", map[string]any{"id": "b2", "currency": "USD"}, asB...), 201)
		tb := call(t, "POST", u+"/v1/transfers", "same-key", map[string]any{"debit_account_id": "a1", "credit_account_id": "b2", "amount": 3, "currency": "USD"}, asB...)
		mustStatus(t, tb, 201)
		if tb.Header.Get("Idempotent-Replayed") != "" || bytes.Equal(tb.Body, ta.Body) {
			t.Fatalf("B got A's answer: %s", tb.Body)
		}
		// A's account a1 is untouched by B's a1.
		if a := call(t, "GET", u+"/v1/accounts/a1", "", nil, asA...).json(t); a["currency"] != "EUR" || a["debits_posted"] != float64(10) {
			t.Fatalf("A's a1: %v", a)
		}
	})
}

// Without API keys, serve refuses an address beyond this machine.
func TestRefusesPublicAddrWithoutKeys(t *testing.T) {
	p := launch(t, false, nil, "serve", "--addr", "0.0.0.0:0", "--db", dbURL(t, "sqlite"))
	err := p.wait(30 * time.Second)
	if err == nil || !strings.Contains(p.Stderr(), "not loopback") {
		t.Fatalf("serve on 0.0.0.0 without keys: %v\n%s", err, p.Stderr())
	}
}

// Health, readiness and metrics.
func TestOperationsEndpoints(t *testing.T) {
	p, _ := serveDB(t, "sqlite", nil)
	u := p.URL
	if r := call(t, "GET", u+"/healthz", "", nil); r.Status != 200 || r.json(t)["status"] != "ok" {
		t.Fatalf("healthz: %d %s", r.Status, r.Body)
	}
	if r := call(t, "GET", u+"/readyz", "", nil); r.Status != 200 || r.json(t)["status"] != "ok" {
		t.Fatalf("readyz: %d %s", r.Status, r.Body)
	}
	account(t, u, "m1", "EUR")
	account(t, u, "m1", "EUR") // replayed: same key, same body
	call(t, "POST", u+"/v1/accounts", "", map[string]any{"currency": "EUR"})
	m := call(t, "GET", u+"/metrics", "", nil)
	for _, want := range []string{
		`idem_http_idempotency_outcomes_total{outcome="first"} 1`,
		`idem_http_idempotency_outcomes_total{outcome="replayed"} 1`,
		`idem_http_idempotency_outcomes_total{outcome="missing_key"} 1`,
		`idem_http_request_duration_seconds_count{code="201",route="POST /v1/accounts"} 2`,
	} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// SIGTERM: stop accepting, drain, exit 0.
	p.signal(syscall.SIGTERM)
	if err := p.wait(30 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// A reversal of a transfer that does not exist (yet) is answered 404 and
// not stored: once the transfer exists, the reversal's retry under the
// same key does the work (one reversal, the money back) instead of
// replaying the 404. With and without group commit, on both databases.
func TestReversalOfMissingTransferNotStored(t *testing.T) {
	for _, gc := range []string{"--group-commit=true", "--group-commit=false"} {
		t.Run(gc, func(t *testing.T) {
			t.Parallel()
			eachDialect(t, func(t *testing.T, dialect string) {
				p, _ := serveDB(t, dialect, nil, gc)
				u := p.URL
				account(t, u, "payer", "EUR")
				account(t, u, "payee", "EUR")
				early := call(t, "POST", u+"/v1/transfers/late-1/reversals", "rev-late-1", map[string]any{"reason": "too early"})
				if early.Status != 404 || early.code(t) != "not_found" {
					t.Fatalf("reversal before its transfer: %d %s, want 404 not_found", early.Status, early.Body)
				}
				body := transfer("payer", "payee", 700)
				body["id"] = "late-1"
				mustStatus(t, call(t, "POST", u+"/v1/transfers", "tr-late-1", body), 201)
				retry := call(t, "POST", u+"/v1/transfers/late-1/reversals", "rev-late-1", map[string]any{"reason": "too early"})
				if retry.Status != 201 || retry.Header.Get("Idempotent-Replayed") == "true" {
					t.Fatalf("retry once the transfer exists: %d replayed=%q %s, want 201 done now",
						retry.Status, retry.Header.Get("Idempotent-Replayed"), retry.Body)
				}
				again := call(t, "POST", u+"/v1/transfers/late-1/reversals", "rev-late-1", map[string]any{"reason": "too early"})
				if again.Status != 201 || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body, retry.Body) {
					t.Fatalf("second retry: %d %s, want the reversal replayed", again.Status, again.Body)
				}
				tr := call(t, "GET", u+"/v1/transfers/late-1", "", nil).json(t)
				if revs, _ := tr["reversals"].([]any); len(revs) != 1 {
					t.Errorf("transfer late-1 has reversals %v, want exactly one", tr["reversals"])
				}
				if b := call(t, "GET", u+"/v1/accounts/payer/balance", "", nil).json(t); b["balance"] != float64(0) {
					t.Errorf("payer's balance %v after the charge and its reversal, want 0", b)
				}
			})
		})
	}
}

// After SIGINT serve says how many requests it drains, then when the drain
// finished, and that it stopped: the log no longer ends at "shutting down".
// The request in flight is one whose handler is reading its body (its
// "100 Continue" came back) when the signal arrives; it completes.
func TestShutdownLogsTheDrain(t *testing.T) {
	t.Parallel()
	p, _ := serveDB(t, "sqlite", nil)
	account(t, p.URL, "a", "EUR")
	account(t, p.URL, "b", "EUR")
	addr := strings.TrimPrefix(p.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"id":"drained","debit_account_id":"a","credit_account_id":"b","amount":1,"currency":"EUR"}`
	fmt.Fprintf(conn, "POST /v1/transfers HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nIdempotency-Key: drain-1\r\n"+
		"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", addr, len(body))
	br := bufio.NewReader(conn)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("want 100 Continue once the handler reads the body: %q %v", line, err)
	}
	_, _ = br.ReadString('\n') // the blank line after the interim response
	p.signal(syscall.SIGINT)
	waitFor(t, func() bool {
		return strings.Contains(p.Stderr(), `msg="idem: shutting down, draining requests" requests=1`)
	})
	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("the drained request: %d, want 201", res.StatusCode)
	}
	if err := p.wait(60 * time.Second); err != nil {
		t.Fatalf("exit after SIGINT: %v\n%s", err, p.Stderr())
	}
	logs := p.Stderr()
	drained := strings.Index(logs, `msg="idem: drained" requests=1 took=`)
	stopped := strings.Index(logs, `msg="idem: stopped"`)
	if drained < 0 || stopped < drained {
		t.Fatalf("want \"idem: drained\" requests=1, then \"idem: stopped\":\n%s", logs)
	}
}
