package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
)

// gcRequest is one request of the equivalence workload.
type gcRequest struct {
	token, path, key, body string
}

// gcAnswer is what a request was answered.
type gcAnswer struct {
	status   int
	replayed bool
	body     []byte
}

// TestGroupCommitEquivalence sends a seeded random workload — hot accounts
// with refusals for insufficient funds, accounts created mid-run, duplicate
// keys sent concurrently (with the same body and with another), transfer
// ids reused, reversals partial, whole and too large, two tenants — through
// the group commit, which records the order in which it applied the
// requests. The same requests applied one at a time in that order, with
// group commit off, on a database of their own, must end in the same
// ledger, the same stored answers and the same events, and be answered the
// same.
func TestGroupCommitEquivalence(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var (
			mu      sync.Mutex
			applied = map[idem.Key]int{} // the last position each key was applied at
			next    int
			shared  int // applyWrites calls that applied more than one request
		)
		batched := gcServer(t, d, true, func(keys []idem.Key) {
			mu.Lock()
			defer mu.Unlock()
			if len(keys) > 1 {
				shared++
			}
			for _, k := range keys {
				applied[k] = next
				next++
			}
		})
		r := rand.New(rand.NewPCG(14, 2026))
		w := newGCWorkload(r)
		answers := map[*gcRequest]gcAnswer{}
		var amu sync.Mutex
		for _, phase := range w.phases() {
			// A phase's requests race each other; the next phase starts
			// once every answer of this one is in, as a client that
			// reverses a transfer after hearing it was posted.
			sendConcurrently(t, batched, phase, 16, func(req *gcRequest, a gcAnswer) {
				amu.Lock()
				answers[req] = a
				amu.Unlock()
			})
		}

		// The requests that were applied (first arrivals whose answer
		// was stored or refused), in the order the group commit applied
		// them.
		type appliedReq struct {
			pos int
			req *gcRequest
		}
		var order []appliedReq
		for _, phase := range w.phases() {
			for _, req := range phase {
				a := answers[req]
				if a.replayed || a.status == http.StatusConflict || a.status >= 500 ||
					(a.status == http.StatusUnprocessableEntity && bytes.Contains(a.body, []byte("idempotency_key_reused"))) {
					continue
				}
				k := idem.Key{Scope: gcTenants[req.token], Operation: gcOperation(req.path), Key: req.key}
				pos, ok := applied[k]
				if !ok {
					if a.status == http.StatusBadRequest {
						continue // refused before the batch: never applied
					}
					t.Fatalf("%s %s answered %d %s but the group commit never applied it", req.path, req.key, a.status, a.body)
				}
				order = append(order, appliedReq{pos, req})
			}
		}
		slices.SortFunc(order, func(a, b appliedReq) int { return a.pos - b.pos })
		if len(order) < 300 || shared == 0 {
			t.Fatalf("%d requests applied, %d transactions shared by several: the workload did not exercise group commit",
				len(order), shared)
		}

		t.Logf("%d requests applied, %d transactions shared by several", len(order), shared)

		// The same requests, one at a time, group commit off.
		ref := drivertest.Open(t, d.Dialect())
		single := gcServer(t, ref, false, nil)
		for _, o := range order {
			a := post(t, single, o.req)
			want := answers[o.req]
			if a.status != want.status || a.replayed || !sameJSON(a.body, want.body) {
				t.Errorf("%s %s: group commit answered %d %s, one at a time %d (replayed %v) %s",
					o.req.path, o.req.key, want.status, want.body, a.status, a.replayed, a.body)
			}
		}
		for _, tb := range gcTables {
			got, want := dumpRows(t, d, tb.q, tb.cols), dumpRows(t, ref, tb.q, tb.cols)
			if len(got) == 0 {
				t.Errorf("%s: no rows", tb.q)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s differs:\ngroup commit: %d rows\n%s\none at a time: %d rows\n%s", tb.q, len(got),
					strings.Join(diffHead(got, want), "\n"), len(want), strings.Join(diffHead(want, got), "\n"))
			}
		}
	})
}

// gcTenants are the workload's tenants by API key.
var gcTenants = map[string]string{"key-for-tenant-one-1": "t1", "key-for-tenant-two-2": "t2"}

// gcServer is the service on d without a relay, with two tenants' API
// keys, group commit on or off, in small batches so that a run makes many.
func gcServer(t *testing.T, d driver.Driver, groupCommit bool, applied func([]idem.Key)) *httptest.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Relay = false
	cfg.GroupCommit = groupCommit
	cfg.BatchMax = 8
	var err error
	if cfg.APIKeys, err = config.ParseAPIKeys("t1:key-for-tenant-one-1,t2:key-for-tenant-two-2"); err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s.testHooks.applied = applied
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func gcOperation(path string) string {
	if strings.HasSuffix(path, "/reversals") {
		return "POST /v1/transfers/{id}/reversals"
	}
	return "POST " + path
}

func post(t *testing.T, ts *httptest.Server, req *gcRequest) gcAnswer {
	t.Helper()
	hr, err := http.NewRequest(http.MethodPost, ts.URL+req.path, strings.NewReader(req.body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", req.key)
	hr.Header.Set("Authorization", "Bearer "+req.token)
	res, err := ts.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return gcAnswer{status: res.StatusCode, replayed: res.Header.Get(idemHTTPReplayed) == "true", body: b}
}

const idemHTTPReplayed = "Idempotent-Replayed"

// sendConcurrently sends reqs from clients goroutines and reports each
// answer.
func sendConcurrently(t *testing.T, ts *httptest.Server, reqs []*gcRequest, clients int, got func(*gcRequest, gcAnswer)) {
	t.Helper()
	ch := make(chan *gcRequest)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for req := range ch {
				got(req, post(t, ts, req))
			}
		})
	}
	for _, req := range reqs {
		ch <- req
	}
	close(ch)
	wg.Wait()
}

// gcWorkload is the equivalence test's requests, in phases.
type gcWorkload struct {
	accounts []*gcRequest   // sent before anything else
	racing   [][]*gcRequest // phases whose requests are sent together
}

func (w *gcWorkload) phases() [][]*gcRequest {
	return append([][]*gcRequest{w.accounts}, w.racing...)
}

func newGCWorkload(r *rand.Rand) *gcWorkload {
	w := &gcWorkload{}
	tokens := []string{"key-for-tenant-one-1", "key-for-tenant-two-2"}
	n := 0
	key := func() string { n++; return fmt.Sprintf("k%d", n) }
	add := func(list *[]*gcRequest, token, path, body string) *gcRequest {
		req := &gcRequest{token: token, path: path, key: key(), body: body}
		*list = append(*list, req)
		return req
	}
	// Per tenant: a bank that may go negative, four hot wallets that may
	// not, one of them in another currency.
	for _, tok := range tokens {
		add(&w.accounts, tok, "/v1/accounts", `{"id":"bank","currency":"EUR"}`)
		for i := range 4 {
			cur := "EUR"
			if i == 3 {
				cur = "USD"
			}
			add(&w.accounts, tok, "/v1/accounts",
				fmt.Sprintf(`{"id":"w%d","currency":"%s","flags":{"debits_must_not_exceed_credits":true}}`, i, cur))
		}
	}
	transfer := func(id, from, to string, amount int, cur string) string {
		return fmt.Sprintf(`{"id":"%s","debit_account_id":"%s","credit_account_id":"%s","amount":%d,"currency":"%s"}`,
			id, from, to, amount, cur)
	}
	wallet := func() string { return fmt.Sprintf("w%d", r.IntN(4)) }

	var p1 []*gcRequest
	var posted []struct{ token, id string }
	for i := range 260 {
		tok := tokens[r.IntN(2)]
		id := fmt.Sprintf("p1-%d", i)
		switch x := r.IntN(20); {
		case x < 5: // fund a wallet
			add(&p1, tok, "/v1/transfers", transfer(id, "bank", wallet(), 1+r.IntN(500), "EUR"))
		case x < 14: // between hot wallets: refused when short of funds
			from, to := wallet(), wallet()
			add(&p1, tok, "/v1/transfers", transfer(id, from, to, 1+r.IntN(300), "EUR"))
		case x < 15: // an account created mid-run, used in the next phase
			add(&p1, tok, "/v1/accounts", fmt.Sprintf(`{"id":"new%d","currency":"EUR"}`, i))
		case x < 17: // the same request twice at once
			req := add(&p1, tok, "/v1/transfers", transfer(id, "bank", wallet(), 1+r.IntN(100), "EUR"))
			p1 = append(p1, &gcRequest{token: req.token, path: req.path, key: req.key, body: req.body})
		case x < 18: // the same key with another body at once
			req := add(&p1, tok, "/v1/transfers", transfer(id, "bank", "w0", 7, "EUR"))
			p1 = append(p1, &gcRequest{token: req.token, path: req.path, key: req.key,
				body: transfer(id+"-other", "bank", "w1", 8, "EUR")})
		case x < 19: // an unknown account, a currency mismatch
			add(&p1, tok, "/v1/transfers", transfer(id, "bank", "nobody", 5, "EUR"))
			add(&p1, tok, "/v1/transfers", transfer(id+"-usd", "bank", "w3", 5, "EUR"))
		default: // an id reused under another key: same content, then other
			add(&p1, tok, "/v1/transfers", transfer(id, "bank", "w2", 11, "EUR"))
			add(&p1, tok, "/v1/transfers", transfer(id, "bank", "w2", 11, "EUR"))
			add(&p1, tok, "/v1/transfers", transfer(id, "bank", "w2", 12, "EUR"))
		}
		if strings.Contains(p1[len(p1)-1].path, "transfers") {
			posted = append(posted, struct{ token, id string }{tok, id})
		}
	}
	r.Shuffle(len(p1), func(i, j int) { p1[i], p1[j] = p1[j], p1[i] })

	var p2 []*gcRequest
	for i := range 160 {
		tok := tokens[r.IntN(2)]
		switch x := r.IntN(10); {
		case x < 5: // reverse: part, all that remains, or too much
			p := posted[r.IntN(len(posted))]
			body := `{"reason":"refund"}`
			if r.IntN(2) == 0 {
				body = fmt.Sprintf(`{"amount":%d}`, 1+r.IntN(200))
			}
			add(&p2, p.token, "/v1/transfers/"+p.id+"/reversals", body)
		case x < 7: // onto accounts created in phase 1 (or never)
			add(&p2, tok, "/v1/transfers", transfer(fmt.Sprintf("p2-%d", i), "bank", fmt.Sprintf("new%d", r.IntN(260)), 3, "EUR"))
		default:
			add(&p2, tok, "/v1/transfers", transfer(fmt.Sprintf("p2-%d", i), wallet(), wallet(), 1+r.IntN(200), "EUR"))
		}
	}
	r.Shuffle(len(p2), func(i, j int) { p2[i], p2[j] = p2[j], p2[i] })
	w.racing = [][]*gcRequest{p1, p2}
	return w
}

// gcTables are the rows both runs must hold alike: times left out (a
// batch stamps its transfers at once), and the outbox's events in each
// key's order.
var gcTables = []struct {
	q    string
	cols int
}{
	{`SELECT tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits,
	        debits_posted, credits_posted, sequence FROM ledger_accounts ORDER BY tenant, id`, 8},
	{`SELECT tenant, id, debit_account_id, credit_account_id, amount, currency, coalesce(reverses_id, ''),
	        coalesce(reason, '') FROM ledger_transfers ORDER BY tenant, id`, 8},
	{`SELECT tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted
	   FROM ledger_entries ORDER BY tenant, account_id, sequence`, 8},
	{`SELECT tenant, transfer_id, amount, reversed FROM ledger_reversed_totals ORDER BY tenant, transfer_id`, 4},
	{`SELECT scope, operation, key, fingerprint, status, coalesce(header, ''), coalesce(body, '')
	   FROM idem_keys ORDER BY scope, operation, key`, 7},
	{`SELECT tenant, okey, type, payload FROM idem_outbox ORDER BY tenant, okey, id`, 4},
}

// dumpRows reads q's rows as text, each JSON value in it without the
// times that differ between the runs.
func dumpRows(t *testing.T, d driver.Driver, q string, cols int) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	rows, err := tx.Query(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals := make([]any, cols)
		ptrs := make([]any, cols)
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		var line []string
		for _, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(withoutTimes(b))
			}
			line = append(line, fmt.Sprint(v))
		}
		out = append(out, strings.Join(line, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// withoutTimes is b with every "created_at" member of its JSON emptied; b
// as it is when it is not JSON.
func withoutTimes(b []byte) []byte {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	var strip func(any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "created_at" {
					v[k] = ""
				} else {
					strip(x)
				}
			}
		case []any:
			for _, x := range v {
				strip(x)
			}
		}
	}
	strip(v)
	out, _ := json.Marshal(v)
	return out
}

func sameJSON(a, b []byte) bool { return bytes.Equal(withoutTimes(a), withoutTimes(b)) }

// diffHead is the first rows of a that b lacks.
func diffHead(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
			if len(out) == 5 {
				break
			}
		}
	}
	return out
}
