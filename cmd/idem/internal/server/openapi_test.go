package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"
)

// TestOpenAPIMatchesResponses runs the service on a real database,
// exercises every route of the document — successes, replays and each
// kind of refusal it can provoke — and checks that each answer's status is
// declared for its path and method, its content type is the declared one,
// and its JSON body matches the declared schema. It fails when a route of
// the document was never exercised, so the document cannot list a route
// the service does not have unnoticed.
func TestOpenAPIMatchesResponses(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	cfg := config.Default()
	cfg.Webhooks = []byte("webhooks:\n  stripe:\n    provider: stripe\n    secrets: [\"" + openAPIStripeSecret + "\"]\n")
	ts := newTestServer(t, cfg)
	c := &apiClient{t: t, base: ts.URL, doc: doc, seen: map[string]bool{}}

	// Accounts.
	c.post("/v1/accounts", "acct-a", `{"id":"a","currency":"EUR"}`, 201)
	if r := c.post("/v1/accounts", "acct-a", `{"id":"a","currency":"EUR"}`, 201); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Error("account replay lacks Idempotent-Replayed")
	}
	c.post("/v1/accounts", "acct-b", `{"id":"b","currency":"EUR","metadata":{"owner":"bob"}}`, 201)
	c.post("/v1/accounts", "acct-u", `{"id":"u","currency":"USD"}`, 201)
	c.post("/v1/accounts", "acct-w", `{"id":"w","currency":"EUR","flags":{"debits_must_not_exceed_credits":true}}`, 201)
	c.post("/v1/accounts", "acct-gen", `{"currency":"EUR"}`, 201)
	c.post("/v1/accounts", "", `{"currency":"EUR"}`, 400)                                    // idempotency_key_missing
	c.post("/v1/accounts", strings.Repeat("k", 256), `{"currency":"EUR"}`, 400)              // idempotency_key_invalid
	c.post("/v1/accounts", "acct-a", `{"id":"a","currency":"USD"}`, 422)                     // idempotency_key_reused
	c.post("/v1/accounts", "acct-bad", `{"id":"x","currency":"EUR","colour":"red"}`, 400)    // unknown field
	c.post("/v1/accounts", "acct-a2", `{"id":"a","currency":"USD"}`, 422)                    // account_exists_with_different_currency
	c.post("/v1/accounts", "acct-big", `{"currency":"`+strings.Repeat("E", 2<<20)+`"}`, 413) // body_too_large
	c.get("/v1/accounts/a", 200)
	c.get("/v1/accounts/nope", 404)

	// Transfers and reversals.
	tr := c.post("/v1/transfers", "t-1", `{"id":"t1","debit_account_id":"a","credit_account_id":"b","amount":500,"currency":"EUR"}`, 201)
	c.post("/v1/transfers", "t-1", `{"id":"t1","debit_account_id":"a","credit_account_id":"b","amount":500,"currency":"EUR"}`, 201)
	c.post("/v1/transfers", "t-derived", `{"debit_account_id":"b","credit_account_id":"a","amount":7,"currency":"EUR","metadata":{"order":42}}`, 201)
	c.post("/v1/transfers", "t-funds", `{"debit_account_id":"w","credit_account_id":"b","amount":1,"currency":"EUR"}`, 422)
	c.post("/v1/transfers", "t-cur", `{"debit_account_id":"a","credit_account_id":"u","amount":1,"currency":"EUR"}`, 422)
	c.post("/v1/transfers", "t-same", `{"debit_account_id":"a","credit_account_id":"a","amount":1,"currency":"EUR"}`, 422)
	c.post("/v1/transfers", "t-none", `{"debit_account_id":"a","credit_account_id":"ghost","amount":1,"currency":"EUR"}`, 422)
	c.post("/v1/transfers", "t-amt", `{"debit_account_id":"a","credit_account_id":"b","amount":1.5,"currency":"EUR"}`, 400)
	c.post("/v1/transfers", "t-1b", `{"id":"t1","debit_account_id":"a","credit_account_id":"b","amount":501,"currency":"EUR"}`, 422)
	c.get("/v1/transfers/t1", 200)
	c.get("/v1/transfers/ghost", 404)
	batch := `{"transfers":[{"id":"tb1","debit_account_id":"a","credit_account_id":"b","amount":3,"currency":"EUR"},` +
		`{"id":"t1","debit_account_id":"a","credit_account_id":"b","amount":500,"currency":"EUR"},` +
		`{"debit_account_id":"w","credit_account_id":"b","amount":1,"currency":"EUR"}]}`
	br := c.post("/v1/transfers/batch", "tb-1", batch, 200)
	for _, want := range []string{`"status":"created"`, `"status":"existing"`, `"status":"refused"`, `"code":"insufficient_funds"`} {
		if !bytes.Contains(br.Body, []byte(want)) {
			t.Errorf("POST /v1/transfers/batch: no %s in %s", want, br.Body)
		}
	}
	c.post("/v1/transfers/batch", "tb-1", batch, 200)
	c.post("/v1/transfers/batch", "tb-2", `{"transfers":[]}`, 400)
	c.post("/v1/transfers/batch", "tb-3", `{"transfers":[{"debit_account_id":"a","credit_account_id":"b","amount":"3","currency":"EUR"}]}`, 400)
	if tr.Header.Get("Location") != "/v1/transfers/t1" {
		t.Errorf("Location = %q", tr.Header.Get("Location"))
	}
	c.post("/v1/transfers/t1/reversals", "r-1", `{"amount":100,"reason":"refund"}`, 201)
	c.post("/v1/transfers/t1/reversals", "r-1", `{"amount":100,"reason":"refund"}`, 201)
	rev := c.post("/v1/transfers/t1/reversals", "r-2", `{"id":"r2","reason":"rest"}`, 201)
	c.post("/v1/transfers/t1/reversals", "r-3", `{"amount":1}`, 422) // reversal_exceeds_remaining
	c.post("/v1/transfers/r2/reversals", "r-4", `{}`, 422)           // cannot_reverse_reversal
	c.post("/v1/transfers/ghost/reversals", "r-5", `{}`, 404)
	c.post("/v1/transfers/t1/reversals", "r-6", `{"amount":-3}`, 400)
	if body := c.get("/v1/transfers/t1", 200).Body; !bytes.Contains(body, []byte(`"reverses_id":"t1"`)) {
		t.Errorf("transfer t1 shows no reversals: %s", body)
	}
	_ = rev

	// Holds: reserve, post part, void; the refusals of each.
	c.post("/v1/transfers", "h-1", `{"id":"h1","debit_account_id":"a","credit_account_id":"b","amount":50,"currency":"EUR","pending":true,"timeout_seconds":3600}`, 201)
	c.post("/v1/transfers", "h-2", `{"id":"h2","debit_account_id":"a","credit_account_id":"b","amount":20,"currency":"EUR","pending":true}`, 201)
	c.post("/v1/transfers", "h-bad", `{"debit_account_id":"a","credit_account_id":"b","amount":1,"currency":"EUR","pending":true,"timeout_seconds":0}`, 400)
	c.get("/v1/transfers?status=pending&account_id=a&limit=1", 200)
	c.get("/v1/transfers?status=held", 400)
	c.get("/v1/transfers", 200)
	c.post("/v1/transfers/h1/post", "p-1", `{"amount":30}`, 201)
	c.post("/v1/transfers/h1/post", "p-1", `{"amount":30}`, 201)
	c.post("/v1/transfers/h1/void", "v-1", `{}`, 422) // pending_transfer_already_posted
	c.post("/v1/transfers/h1/post", "p-2", `{"amount":0}`, 400)
	c.post("/v1/transfers/t1/post", "p-3", `{}`, 422) // transfer_not_pending
	c.post("/v1/transfers/ghost/void", "v-2", `{}`, 404)
	c.post("/v1/transfers/h2/void", "v-3", `{}`, 201)
	c.post("/v1/transfers/h2/reversals", "r-7", `{}`, 422) // cannot_reverse_pending

	// Balances and entries.
	c.get("/v1/accounts/a/balance", 200)
	c.get("/v1/accounts/a/balance?as_of="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), 200)
	c.get("/v1/accounts/a/balance?as_of=yesterday", 400)
	c.get("/v1/accounts/nope/balance", 404)
	first := c.get("/v1/accounts/a/entries?limit=1", 200)
	var pg struct {
		NextCursor *string `json:"next_cursor"`
	}
	_ = json.Unmarshal(first.Body, &pg)
	if pg.NextCursor == nil {
		t.Fatalf("entries page of 1 has no next_cursor: %s", first.Body)
	}
	c.get("/v1/accounts/a/entries?limit=1000&after="+*pg.NextCursor, 200)
	c.get("/v1/accounts/a/entries?limit=0", 400)
	c.get("/v1/accounts/nope/entries", 404)

	// Events, once the relay has published them all and the list shows
	// them: on Postgres only after every older transaction in the cluster
	// has ended, other tests' too (docs/outbox.md). The bound is for a
	// hang, not a speed check.
	deadline := time.Now().Add(60 * time.Second)
	for !bytes.Contains(c.raw("GET", "/v1/events?limit=1000", "", "", nil).Body, []byte(`"type":"transfer.reversed"`)) || bytes.Contains(c.raw("GET", "/v1/events?limit=1000", "", "", nil).Body, []byte(`"published_at":null`)) {
		if time.Now().After(deadline) {
			t.Fatal("the relay did not publish the events in 60s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ev := c.get("/v1/events?limit=2", 200)
	_ = json.Unmarshal(ev.Body, &pg)
	if pg.NextCursor == nil {
		t.Fatalf("events page of 2 has no next_cursor: %s", ev.Body)
	}
	c.get("/v1/events?after="+*pg.NextCursor, 200)
	c.get("/v1/events?after=not-a-cursor", 400)

	// Webhooks: a signed delivery, its redelivery, a forgery, an unknown
	// endpoint.
	delivery := `{"id":"evt_1","type":"charge.succeeded","data":{"amount":500}}`
	signed := func(ts time.Time) http.Header {
		p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{
			Payload: []byte(delivery), Secret: openAPIStripeSecret, Timestamp: ts})
		return http.Header{"Stripe-Signature": {p.Header}}
	}
	for _, want := range []int{200, 200} {
		wh := c.raw("POST", "/v1/webhooks/stripe", "", delivery, signed(time.Now()))
		if wh.Status != want {
			t.Fatalf("stripe delivery: %d %s", wh.Status, wh.Body)
		}
		c.check("POST", "/v1/webhooks/stripe", wh)
	}
	forged := c.raw("POST", "/v1/webhooks/stripe", "", delivery, http.Header{"Stripe-Signature": {"t=1,v1=00"}})
	if forged.Status != 401 {
		t.Fatalf("forged delivery: %d %s", forged.Status, forged.Body)
	}
	c.check("POST", "/v1/webhooks/stripe", forged)
	c.check("POST", "/v1/webhooks/nowhere", c.raw("POST", "/v1/webhooks/nowhere", "", delivery, signed(time.Now())))

	// Webhook endpoints: the tenant's own receivers.
	ep := c.post("/v1/webhook-endpoints", "ep-1", `{"url":"https://example.com/hook","event_types":["transfer.*"],"description":"orders"}`, 201)
	if again := c.post("/v1/webhook-endpoints", "ep-1", `{"url":"https://example.com/hook","event_types":["transfer.*"],"description":"orders"}`, 201); !bytes.Equal(again.Body, ep.Body) {
		t.Errorf("a retried create answered another endpoint: %s, then %s", ep.Body, again.Body)
	}
	var created struct{ ID, Secret string }
	_ = json.Unmarshal(ep.Body, &created)
	if !strings.HasPrefix(created.Secret, "whsec_") || ep.Header.Get("Location") != "/v1/webhook-endpoints/"+created.ID {
		t.Errorf("create answered %s, Location %q", ep.Body, ep.Header.Get("Location"))
	}
	c.post("/v1/webhook-endpoints", "ep-2", `{"url":"http://10.0.0.1/hook"}`, 400)
	c.post("/v1/webhook-endpoints", "ep-1", `{"url":"https://example.com/other"}`, 422)
	epPath := "/v1/webhook-endpoints/" + created.ID
	if got := c.get(epPath, 200); bytes.Contains(got.Body, []byte(created.Secret)) {
		t.Errorf("GET shows the secret: %s", got.Body)
	}
	c.get("/v1/webhook-endpoints/ep_nope", 404)
	c.get("/v1/webhook-endpoints?limit=1", 200)
	c.get("/v1/webhook-endpoints?limit=0", 400)
	c.expect("PATCH", epPath, "ep-patch", `{"enabled":false,"rate_limit":5}`, 200)
	c.expect("PATCH", epPath, "ep-patch-bad", `{"event_types":["a..b"]}`, 400)
	c.expect("PATCH", "/v1/webhook-endpoints/ep_nope", "ep-patch-none", `{}`, 404)
	if r := c.post(epPath+"/rotate-secret", "ep-rot", `{}`, 200); bytes.Contains(r.Body, []byte(created.Secret)) || !bytes.Contains(r.Body, []byte(`"secrets_active":2`)) {
		t.Errorf("rotate answered %s", r.Body)
	}
	c.post("/v1/webhook-endpoints/ep_nope/rotate-secret", "ep-rot-none", `{}`, 404)
	c.get(epPath+"/attempts", 200)
	c.get(epPath+"/attempts?after=nonsense", 400)
	c.get("/v1/webhook-endpoints/ep_nope/attempts", 404)
	var evs struct {
		Data []struct{ ID string } `json:"data"`
	}
	_ = json.Unmarshal(c.get("/v1/events?limit=1", 200).Body, &evs)
	if len(evs.Data) == 0 {
		t.Fatal("no event to replay")
	}
	if r := c.post(epPath+"/replay", "ep-replay", `{"event_id":"`+evs.Data[0].ID+`"}`, 202); !bytes.Contains(r.Body, []byte(`"deliveries":1`)) {
		t.Errorf("replay of an event answered %s", r.Body)
	}
	c.post(epPath+"/replay", "ep-replay-since", `{"since":"2020-01-01T00:00:00Z"}`, 202)
	c.post(epPath+"/replay", "ep-replay-both", `{}`, 400)
	c.post("/v1/webhook-endpoints/ep_nope/replay", "ep-replay-none", `{"since":"2020-01-01T00:00:00Z"}`, 404)
	c.expect("DELETE", epPath, "ep-del", "", 204)
	c.expect("DELETE", epPath, "ep-del", "", 204) // the stored answer
	c.expect("DELETE", epPath, "ep-del-2", "", 404)

	// A body declared as not JSON, and (no API keys here) a request for a
	// host name that is not this machine's.
	for _, path := range []string{"/v1/accounts", "/v1/transfers", "/v1/transfers/t1/reversals"} {
		r := c.raw("POST", path, "k-plain", `{}`, http.Header{"Content-Type": {"text/plain"}})
		if r.Status != 415 {
			t.Errorf("POST %s as text/plain: %d %s", path, r.Status, r.Body)
		}
		c.check("POST", path, r)
	}
	for _, path := range []string{"/v1/accounts/a", "/v1/events", "/readyz", "/openapi.json"} {
		r := c.raw("GET", path, "", "", http.Header{"Host": {"evil.example"}})
		if r.Status != 421 {
			t.Errorf("GET %s for evil.example: %d %s", path, r.Status, r.Body)
		}
		c.check("GET", path, r)
	}
	if r := c.raw("POST", "/v1/transfers", "k-host", `{}`, http.Header{"Host": {"evil.example"}}); r.Status != 421 {
		t.Errorf("POST /v1/transfers for evil.example: %d %s", r.Status, r.Body)
	} else {
		c.check("POST", "/v1/transfers", r)
	}

	// Operations.
	c.get("/healthz", 200)
	c.get("/readyz", 200)
	c.get("/metrics", 200)
	c.get("/openapi.json", 200)

	// Keyless writes from another site's page, under the rollout mode.
	cfg = config.Default()
	cfg.IdempotencyKey = config.KeyOptional
	optional := &apiClient{t: t, base: newTestServer(t, cfg).URL, doc: doc, seen: c.seen}
	for _, path := range []string{"/v1/accounts", "/v1/transfers", "/v1/transfers/batch", "/v1/transfers/t1/reversals"} {
		r := optional.raw("POST", path, "", `{}`, http.Header{"Content-Type": {"application/json"}, "Origin": {"http://evil.example"}})
		if r.Status != 403 {
			t.Errorf("keyless POST %s from another origin: %d %s", path, r.Status, r.Body)
		}
		optional.check("POST", path, r)
	}

	// 401s, from a service with API keys.
	cfg = config.Default()
	keys, err := config.ParseAPIKeys("acme:secret-acme-key-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	cfg.APIKeys = keys
	authed := &apiClient{t: t, base: newTestServer(t, cfg).URL, doc: doc, seen: c.seen}
	authed.post("/v1/accounts", "k", `{"currency":"EUR"}`, 401)
	authed.post("/v1/transfers", "k", `{}`, 401)
	authed.post("/v1/transfers/t1/reversals", "k", `{}`, 401)
	authed.get("/v1/accounts/a", 401)
	authed.get("/v1/accounts/a/balance", 401)
	authed.get("/v1/accounts/a/entries", 401)
	authed.get("/v1/transfers/t1", 401)
	authed.get("/v1/events", 401)
	authed.get("/metrics", 404) // API keys and no admin key: on --metrics-addr only
	authed.get("/v1/webhook-endpoints", 401)
	authed.get("/v1/webhook-endpoints/ep_x", 401)
	authed.get("/v1/webhook-endpoints/ep_x/attempts", 401)
	authed.post("/v1/webhook-endpoints", "k", `{}`, 401)
	authed.post("/v1/webhook-endpoints/ep_x/replay", "k", `{}`, 401)
	authed.post("/v1/webhook-endpoints/ep_x/rotate-secret", "k", `{}`, 401)
	authed.expect("PATCH", "/v1/webhook-endpoints/ep_x", "k", `{}`, 401)
	authed.expect("DELETE", "/v1/webhook-endpoints/ep_x", "k", "", 401)
	authed.bearer = "secret-acme-key-0123456789"
	authed.post("/v1/accounts", "k", `{"id":"a","currency":"EUR"}`, 201)
	authed.get("/metrics", 404)
	admin, err := config.ParseAdminKey("admin-key-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	cfg.AdminKeyHash = admin
	withAdmin := &apiClient{t: t, base: newTestServer(t, cfg).URL, doc: doc, seen: c.seen, bearer: "secret-acme-key-0123456789"}
	withAdmin.get("/metrics", 401) // a tenant's key is not the admin key
	withAdmin.bearer = "admin-key-0123456789abcdef"
	withAdmin.get("/metrics", 200)

	// Every operation of the document was exercised.
	for path, ops := range doc.Paths {
		for method := range ops {
			op := strings.ToUpper(method) + " " + path
			if !c.seen[op] {
				t.Errorf("%s is in openapi.json but the test never exercised it", op)
			}
		}
	}
}

const openAPIStripeSecret = "whsec_openapi_test_secret_0123456789"

type discardPublisher struct{}

func (discardPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	return make([]error, len(msgs))
}

func (discardPublisher) Close() error { return nil }

// openapiDoc is the part of an OpenAPI document the test reads.
type openapiDoc struct {
	Paths map[string]map[string]struct {
		Responses map[string]struct {
			Content map[string]struct {
				Schema map[string]any `json:"schema"`
			} `json:"content"`
		} `json:"responses"`
	} `json:"paths"`
	Components struct {
		Schemas map[string]map[string]any `json:"schemas"`
	} `json:"components"`
}

func loadDoc(t *testing.T) *openapiDoc {
	t.Helper()
	var doc openapiDoc
	dec := json.NewDecoder(bytes.NewReader(openapiJSON))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return &doc
}

func newTestServer(t *testing.T, cfg config.Config) *httptest.Server {
	t.Helper()
	cfg.Relay = false
	d := drivertest.Open(t, "postgres")
	s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// A relay with a publisher that drops everything: events are listed
	// once the relay has sequenced them, and show published_at once sent.
	r, err := outbox.NewRelay(d, outbox.RelayConfig{Publisher: discardPublisher{}, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.relay = &Relay{Relay: r}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

type apiResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

type apiClient struct {
	t      *testing.T
	base   string
	bearer string
	doc    *openapiDoc
	mu     sync.Mutex
	seen   map[string]bool // "METHOD /path/{template}" exercised
}

func (c *apiClient) get(path string, want int) apiResponse {
	c.t.Helper()
	return c.expect("GET", path, "", "", want)
}

func (c *apiClient) post(path, key, body string, want int) apiResponse {
	c.t.Helper()
	return c.expect("POST", path, key, body, want)
}

func (c *apiClient) expect(method, path, key, body string, want int) apiResponse {
	c.t.Helper()
	r := c.raw(method, path, key, body, nil)
	if r.Status != want {
		c.t.Errorf("%s %s: status %d, want %d: %s", method, path, r.Status, want, truncateBody(r.Body))
	}
	c.check(method, path, r)
	return r
}

func (c *apiClient) raw(method, path, key, body string, hdr http.Header) apiResponse {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	for name, vals := range hdr {
		if name == "Host" {
			req.Host = vals[0]
			continue
		}
		req.Header[name] = vals
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return apiResponse{Status: res.StatusCode, Header: res.Header, Body: b}
}

// check validates one answer against the document.
func (c *apiClient) check(method, path string, r apiResponse) {
	c.t.Helper()
	tmpl, ok := c.match(path)
	if !ok {
		c.t.Errorf("%s %s: no path of openapi.json matches", method, path)
		return
	}
	c.mu.Lock()
	c.seen[method+" "+tmpl] = true
	c.mu.Unlock()
	op, ok := c.doc.Paths[tmpl][strings.ToLower(method)]
	if !ok {
		c.t.Errorf("%s %s: openapi.json declares no %s for %s", method, path, method, tmpl)
		return
	}
	resp, ok := op.Responses[fmt.Sprint(r.Status)]
	if !ok {
		c.t.Errorf("%s %s: status %d is not declared for %s %s: %s", method, path, r.Status, method, tmpl, truncateBody(r.Body))
		return
	}
	if r.Status == http.StatusNoContent && len(resp.Content) == 0 && len(r.Body) == 0 {
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	media, ok := resp.Content[ct]
	if !ok {
		c.t.Errorf("%s %s: %d answered %q, openapi.json declares %v", method, path, r.Status, ct, slices.Collect(mapKeys(resp.Content)))
		return
	}
	if !strings.HasSuffix(ct, "json") {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		c.t.Errorf("%s %s: body is not JSON: %v", method, path, err)
		return
	}
	for _, e := range validate(c.doc, media.Schema, v, "body") {
		c.t.Errorf("%s %s (%d): %s", method, path, r.Status, e)
	}
}

// match finds the document's path template that path (without its query)
// matches.
func (c *apiClient) match(path string) (string, bool) {
	path, _, _ = strings.Cut(path, "?")
	var best string
	for tmpl := range c.doc.Paths {
		re := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(tmpl), `[^/]+`) + "$"
		if regexp.MustCompile(re).MatchString(path) && (best == "" || strings.Count(tmpl, "{") < strings.Count(best, "{")) {
			best = tmpl
		}
	}
	return best, best != ""
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func truncateBody(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// validate checks v against the subset of JSON Schema the document uses:
// $ref, type (a name or a list, "null" included), properties, required,
// items, enum and format date-time. A schema without type accepts any
// value. It returns one message per violation.
func validate(doc *openapiDoc, s map[string]any, v any, at string) []string {
	if ref, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		target, ok := doc.Components.Schemas[name]
		if !ok {
			return []string{at + ": unknown $ref " + ref}
		}
		return validate(doc, target, v, at)
	}
	var errs []string
	if t, ok := s["type"]; ok {
		var types []string
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				types = append(types, x.(string))
			}
		}
		if !slices.ContainsFunc(types, func(name string) bool { return isType(name, v) }) {
			return []string{fmt.Sprintf("%s: %s is not of type %v", at, truncateBody(mustJSON(v)), types)}
		}
	}
	if enum, ok := s["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		errs = append(errs, fmt.Sprintf("%s: %v is not one of %v", at, v, enum))
	}
	if s["format"] == "date-time" {
		if str, ok := v.(string); ok {
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %q is not a date-time", at, str))
			}
		}
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for _, r := range asStrings(s["required"]) {
			if _, ok := v[r]; !ok {
				errs = append(errs, fmt.Sprintf("%s: required %q is missing", at, r))
			}
		}
		for k, pv := range v {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if props != nil {
					errs = append(errs, fmt.Sprintf("%s: %q is not declared", at, k))
				}
				continue
			}
			errs = append(errs, validate(doc, ps, pv, at+"."+k)...)
		}
	case []any:
		if items, ok := s["items"].(map[string]any); ok {
			for i, x := range v {
				errs = append(errs, validate(doc, items, x, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	}
	return errs
}

func isType(name string, v any) bool {
	switch name {
	case "null":
		return v == nil
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := n.Int64()
		return err == nil
	}
	return false
}

func asStrings(v any) []string {
	var out []string
	if xs, ok := v.([]any); ok {
		for _, x := range xs {
			out = append(out, fmt.Sprint(x))
		}
	}
	return out
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestOpenAPIValidatorRejects keeps the checker honest: a body that
// breaks the document must be reported.
func TestOpenAPIValidatorRejects(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	tests := []struct {
		name, schema, body, want string
	}{
		{"missing required", "Account", `{"id":"a"}`, `required "currency" is missing`},
		{"wrong type", "Account", `{"id":"a","currency":"EUR","flags":{},"debits_posted":"1","credits_posted":0,"balance":0,"created_at":"2026-01-01T00:00:00Z"}`, "debits_posted"},
		{"not an integer", "Entry", `{"transfer_id":"t","account_id":"a","sequence":1.5,"amount":1,"direction":"debit","debits_posted":1,"credits_posted":0,"balance":-1,"created_at":"2026-01-01T00:00:00Z"}`, "sequence"},
		{"enum", "Entry", `{"transfer_id":"t","account_id":"a","sequence":1,"amount":1,"direction":"sideways","debits_posted":1,"credits_posted":0,"balance":-1,"created_at":"2026-01-01T00:00:00Z"}`, "not one of"},
		{"undeclared member", "Problem", `{"type":"about:blank","title":"x","status":400,"code":"c","extra":1}`, `"extra" is not declared`},
		{"null where not nullable", "EntryList", `{"data":null,"next_cursor":null}`, "body.data"},
		{"bad date-time", "Balance", `{"account_id":"a","as_of":"yesterday","debits_posted":0,"credits_posted":0,"balance":0}`, "not a date-time"},
		{"item", "EventList", `{"data":[{"id":"e"}],"next_cursor":null}`, "body.data[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dec := json.NewDecoder(strings.NewReader(tt.body))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			errs := validate(doc, map[string]any{"$ref": "#/components/schemas/" + tt.schema}, v, "body")
			if !strings.Contains(strings.Join(errs, "\n"), tt.want) {
				t.Errorf("errors %q lack %q", errs, tt.want)
			}
		})
	}
}
