package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
)

// serveHTTP serves the service on d over a real listener.
func serveHTTP(t *testing.T, d driver.Driver, cfg config.Config) string {
	t.Helper()
	cfg.Relay = false
	s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

type answer struct {
	status int
	header http.Header
	body   string
}

// send makes one request for host (the Host header; "" keeps the
// listener's address), with header pairs.
func send(t *testing.T, method, url, host, body string, header ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, string(b)}
}

func problemCode(t *testing.T, a answer) string {
	t.Helper()
	var p struct{ Code string }
	if err := json.Unmarshal([]byte(a.body), &p); err != nil || a.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("not a problem (%d %s): %s", a.status, a.header.Get("Content-Type"), a.body)
	}
	return p.Code
}

// TestLoopbackModeAnswersOnlyLoopbackNames: without API keys the service
// trusts whoever reaches its loopback listener, and a web page that had
// its own name resolve to 127.0.0.1 (DNS rebinding) does. Its requests
// still name it in Host: they are answered 421 and read and write nothing
// — neither the console's stored answers nor a transfer posted as
// text/plain, a body any page may send. Loopback names, any port, pass.
func TestLoopbackModeAnswersOnlyLoopbackNames(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		u := serveHTTP(t, d, config.Default())
		port := u[strings.LastIndex(u, ":")+1:]
		for _, id := range []string{"alice", "bob"} {
			if a := send(t, "POST", u+"/v1/accounts", "", `{"id":"`+id+`","currency":"EUR"}`, "Idempotency-Key", "create-"+id); a.status != 201 {
				t.Fatalf("create %s: %d %s", id, a.status, a.body)
			}
		}
		const transfer = `{"debit_account_id":"alice","credit_account_id":"bob","amount":1250,"currency":"EUR"}`
		for _, host := range []string{"evil.example", "evil.example:" + port, "localhost.evil.example:" + port, "0.0.0.0:" + port} {
			a := send(t, "POST", u+"/v1/transfers", host, transfer, "Idempotency-Key", "rebound-1", "Content-Type", "text/plain")
			if a.status != http.StatusMisdirectedRequest || problemCode(t, a) != "misdirected_request" {
				t.Errorf("POST /v1/transfers for %q: %d %s", host, a.status, a.body)
			}
			a = send(t, "GET", u+"/ui/keys?tenant=default&key=create-alice", host, "")
			if a.status != http.StatusMisdirectedRequest || strings.Contains(a.body, "alice") {
				t.Errorf("GET /ui/keys for %q: %d %s", host, a.status, a.body)
			}
			if a := send(t, "GET", u+"/v1/accounts/alice", host, ""); a.status != http.StatusMisdirectedRequest || strings.Contains(a.body, "alice") {
				t.Errorf("GET /v1/accounts/alice for %q: %d %s", host, a.status, a.body)
			}
		}
		if n := countRows(t, d, "SELECT count(*) FROM ledger_transfers"); n != 0 {
			t.Fatalf("%d transfers written by refused requests", n)
		}
		if n := countRows(t, d, "SELECT count(*) FROM idem_keys"); n != 2 {
			t.Fatalf("%d idempotency keys, want the 2 accounts'", n)
		}
		if n := countRows(t, d, "SELECT count(*) FROM idem_outbox"); n != 2 {
			t.Fatalf("%d outbox messages, want the 2 accounts'", n)
		}

		// Loopback names pass, any case and port, with or without the
		// trailing dot.
		for _, host := range []string{"localhost", "localhost:" + port, "LocalHost.:" + port, "127.0.0.1:" + port, "[::1]:" + port, "[::1]"} {
			if a := send(t, "GET", u+"/v1/accounts/alice", host, ""); a.status != 200 {
				t.Errorf("GET /v1/accounts/alice for %q: %d %s", host, a.status, a.body)
			}
			if a := send(t, "GET", u+"/ui/keys?tenant=default&key=create-alice", host, ""); a.status != 200 || !strings.Contains(a.body, "POST /v1/accounts") {
				t.Errorf("GET /ui/keys for %q: %d", host, a.status)
			}
		}
		if a := send(t, "POST", u+"/v1/transfers", "localhost:"+port, transfer, "Idempotency-Key", "order-1"); a.status != 201 {
			t.Fatalf("transfer for localhost: %d %s", a.status, a.body)
		}
		if n := countRows(t, d, "SELECT count(*) FROM ledger_transfers"); n != 1 {
			t.Fatalf("%d transfers, want 1", n)
		}
		// Liveness says nothing, and a webhook is authenticated by its
		// signature (here: an endpoint that does not exist), whatever the
		// name.
		if a := send(t, "GET", u+"/healthz", "evil.example", ""); a.status != 200 {
			t.Errorf("/healthz for evil.example: %d", a.status)
		}
		if a := send(t, "POST", u+"/v1/webhooks/nowhere", "hooks.example", "{}"); a.status != http.StatusNotFound {
			t.Errorf("webhook for hooks.example: %d %s", a.status, a.body)
		}
	})
}

// TestAPIKeysServeAnyName: with API keys the key is the authority, and
// the service may be served under any name.
func TestAPIKeysServeAnyName(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	keys, err := config.ParseAPIKeys("acme:secret-acme-key-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	cfg.APIKeys = keys
	u := serveHTTP(t, drivertest.Open(t, "sqlite"), cfg)
	a := send(t, "POST", u+"/v1/accounts", "idem.example.com", `{"id":"a","currency":"EUR"}`,
		"Idempotency-Key", "k", "Authorization", "Bearer secret-acme-key-0123456789")
	if a.status != 201 {
		t.Fatalf("with an API key under a public name: %d %s", a.status, a.body)
	}
}

// TestWritesRefuseBodiesDeclaredAsNotJSON: a write declared text/plain or
// multipart is refused 415 before its key is claimed, so nothing is stored
// and the key stays free. JSON, no type, and what curl -d sends
// (application/x-www-form-urlencoded, which the README's tour uses) are
// read as JSON.
func TestWritesRefuseBodiesDeclaredAsNotJSON(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		u := serveHTTP(t, d, config.Default())
		for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "multipart/form-data; boundary=x", "application/xml", "bogus/"} {
			a := send(t, "POST", u+"/v1/accounts", "", `{"id":"a","currency":"EUR"}`, "Idempotency-Key", "acct-a", "Content-Type", ct)
			if a.status != http.StatusUnsupportedMediaType || problemCode(t, a) != "unsupported_media_type" {
				t.Errorf("Content-Type %q: %d %s", ct, a.status, a.body)
			}
		}
		if n := countRows(t, d, "SELECT count(*) FROM idem_keys"); n != 0 {
			t.Fatalf("%d keys stored for refused bodies", n)
		}
		if n := countRows(t, d, "SELECT count(*) FROM ledger_accounts"); n != 0 {
			t.Fatalf("%d accounts stored for refused bodies", n)
		}
		for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/x-www-form-urlencoded", "", "application/merge-patch+json"} {
			key := []string{"acct-a", "acct-b", "acct-c", "acct-d", "acct-e"}[i]
			a := send(t, "POST", u+"/v1/accounts", "", `{"id":"`+key+`","currency":"EUR"}`, "Idempotency-Key", key, "Content-Type", ct)
			if a.status != 201 {
				t.Errorf("Content-Type %q: %d %s", ct, a.status, a.body)
			}
		}
		if n := countRows(t, d, "SELECT count(*) FROM ledger_accounts"); n != 5 {
			t.Fatalf("%d accounts, want 5", n)
		}
	})
}

// TestEveryAnswerIsNotStoredNorSniffed: first answers, replays, reads,
// problems and console pages all carry Cache-Control: no-store and
// X-Content-Type-Options: nosniff — a replay is built from the stored
// answer's allow-listed headers, which do not include them.
func TestEveryAnswerIsNotStoredNorSniffed(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		u := serveHTTP(t, d, config.Default())
		answers := map[string]answer{
			"first":  send(t, "POST", u+"/v1/accounts", "", `{"id":"a","currency":"EUR"}`, "Idempotency-Key", "acct-a"),
			"replay": send(t, "POST", u+"/v1/accounts", "", `{"id":"a","currency":"EUR"}`, "Idempotency-Key", "acct-a"),
			"stored refusal": send(t, "POST", u+"/v1/transfers", "", `{"debit_account_id":"a","credit_account_id":"ghost","amount":1,"currency":"EUR"}`,
				"Idempotency-Key", "t-ghost"),
			"replayed refusal": send(t, "POST", u+"/v1/transfers", "", `{"debit_account_id":"a","credit_account_id":"ghost","amount":1,"currency":"EUR"}`,
				"Idempotency-Key", "t-ghost"),
			"read":     send(t, "GET", u+"/v1/accounts/a", "", ""),
			"problem":  send(t, "GET", u+"/v1/accounts/nope", "", ""),
			"no route": send(t, "GET", u+"/nowhere", "", ""),
			"console":  send(t, "GET", u+"/ui/", "", ""),
			"openapi":  send(t, "GET", u+"/openapi.json", "", ""),
		}
		if answers["replay"].header.Get("Idempotent-Replayed") != "true" || answers["replayed refusal"].header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("not replays: %v / %v", answers["replay"].header, answers["replayed refusal"].header)
		}
		for name, a := range answers {
			if a.header.Get("Cache-Control") != "no-store" || a.header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s (%d): Cache-Control %q, X-Content-Type-Options %q", name, a.status,
					a.header.Get("Cache-Control"), a.header.Get("X-Content-Type-Options"))
			}
		}
	})
}

// TestKeylessWritesUnderOptional: under --idempotency-key=optional a write
// without a key runs unguarded, so it gets the checks a key would have
// given it. Its body is held to --max-body-bytes (413, as a keyed one);
// it must declare application/json (urlencoded or no type, which a page
// of another site may post without asking, is 415); and a browser's
// cross-site request (Sec-Fetch-Site cross-site, or an Origin that is not
// the server's) is 403. Nothing is written for any of them; the same
// write from curl or from the server's own origin runs.
func TestKeylessWritesUnderOptional(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		cfg := config.Default()
		cfg.IdempotencyKey = config.KeyOptional
		u := serveHTTP(t, d, cfg)
		for _, id := range []string{"alice", "bob"} {
			if a := send(t, "POST", u+"/v1/accounts", "", `{"id":"`+id+`","currency":"EUR"}`, "Idempotency-Key", "create-"+id); a.status != 201 {
				t.Fatalf("create %s: %d %s", id, a.status, a.body)
			}
		}
		const transfer = `{"debit_account_id":"alice","credit_account_id":"bob","amount":1250,"currency":"EUR"}`
		big := `{"debit_account_id":"alice","credit_account_id":"bob","amount":1,"currency":"EUR","metadata":{"pad":"` +
			strings.Repeat("x", 2<<20) + `"}}`
		batch := `{"transfers":[` + transfer + `]}`
		for _, tc := range []struct {
			name, path, body string
			header           []string
			status           int
			code             string
		}{
			{"2 MiB body", "/v1/transfers", big, []string{"Content-Type", "application/json"}, 413, "body_too_large"},
			{"2 MiB batch", "/v1/transfers/batch", `{"transfers":[` + big + `]}`, []string{"Content-Type", "application/json"}, 413, "body_too_large"},
			{"form post", "/v1/transfers", transfer, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
			{"no type", "/v1/transfers", transfer, nil, 415, "unsupported_media_type"},
			{"form batch", "/v1/transfers/batch", batch, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
			{"cross-site", "/v1/transfers", transfer, []string{"Content-Type", "application/json", "Sec-Fetch-Site", "cross-site"}, 403, "cross_origin_request"},
			{"same-site other origin", "/v1/transfers", transfer, []string{"Content-Type", "application/json", "Sec-Fetch-Site", "same-site"}, 403, "cross_origin_request"},
			{"foreign origin", "/v1/transfers", transfer, []string{"Content-Type", "application/json", "Origin", "http://evil.example"}, 403, "cross_origin_request"},
			{"foreign origin batch", "/v1/transfers/batch", batch, []string{"Content-Type", "application/json", "Origin", "http://localhost:3000"}, 403, "cross_origin_request"},
			{"foreign origin reversal", "/v1/transfers/t1/reversals", `{"amount":1}`, []string{"Content-Type", "application/json", "Origin", "null"}, 403, "cross_origin_request"},
		} {
			a := send(t, "POST", u+tc.path, "", tc.body, tc.header...)
			if a.status != tc.status || problemCode(t, a) != tc.code {
				t.Errorf("%s: %d %s, want %d %s", tc.name, a.status, clip(a.body, 200), tc.status, tc.code)
			}
		}
		if n := countRows(t, d, "SELECT count(*) FROM ledger_transfers"); n != 0 {
			t.Fatalf("%d transfers written by refused keyless writes", n)
		}
		if n := countRows(t, d, "SELECT count(*) FROM idem_outbox"); n != 2 {
			t.Fatalf("%d outbox messages, want the 2 accounts'", n)
		}
		// curl, the server's own origin, and a keyed write run.
		host := strings.TrimPrefix(u, "http://")
		for i, header := range [][]string{
			{"Content-Type", "application/json"},
			{"Content-Type", "application/json; charset=utf-8", "Origin", u, "Sec-Fetch-Site", "same-origin"},
			{"Content-Type", "application/x-www-form-urlencoded", "Idempotency-Key", "keyed-1"},
		} {
			if a := send(t, "POST", u+"/v1/transfers", host, transfer, header...); a.status != 201 {
				t.Errorf("allowed write %d: %d %s", i, a.status, a.body)
			}
		}
		if n := countRows(t, d, "SELECT count(*) FROM ledger_transfers"); n != 3 {
			t.Fatalf("%d transfers, want 3", n)
		}
	})
}
