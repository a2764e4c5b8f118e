package load

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/webhook"
	"github.com/nats-io/nats.go"
)

// bugs are the ways the fake service can break its promises.
type bugs struct {
	doubleApply    bool // a replayed transfer posts its entries again
	replayDiffers  bool // a replay answers with another created_at
	loseTransfer   bool // every 5th transfer is acknowledged but not stored
	refusedApplied bool // a currency-mismatch transfer is refused but posted
	wrongAmount    bool // transfers are stored with one unit more than answered
	eventDoubled   bool // every 10th event is listed twice
	eventMissing   bool // every 10th event is not listed
	natsDoubled    bool // the first events are published twice, past the duplicate window
	natsMissing    bool // every 10th event is never published
	webhookTwice   bool // a redelivery (same webhook-id) is applied again: a new event
	flaky          bool // 503s, 409s and answers lost after commit: not bugs
	// noEvents: GET /v1/events answers 404, as a service that lists no
	// events; the verifier then looks every transfer up by itself.
	noEvents bool
	// commitLost: every 4th new transfer is acknowledged, then lost with
	// its key, entries and event, as a failover of asynchronous
	// replication loses a commit the standby never received.
	commitLost bool
}

// fake is a small in-memory idem: the public API the verifier reads, with
// Idempotency-Key semantics, and switchable bugs. It serializes everything
// under one lock, so its correct mode is trivially exactly-once.
type fake struct {
	t    *testing.T
	bugs bugs
	js   nats.JetStreamContext // publishes events when set

	mu        sync.Mutex
	n         int
	keys      map[string]stored
	accounts  map[string]*facct
	transfers map[string]*ftransfer
	events    []*fevent
	// sigs holds the distinct webhook-signature values each delivery id
	// arrived with.
	sigs map[string]map[string]bool
	wh   webhook.Verifier
	// lostIDs are the transfers whose commit commitLost dropped;
	// dropping tells post not to keep the key of the one being answered.
	lostIDs  map[string]bool
	dropping bool
	// transferGets counts GET /v1/transfers/{id}.
	transferGets int
}

// fakeWebhookSecret is the fake's Standard Webhooks endpoint secret.
var fakeWebhookSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("load-test-secret-of-32-bytes-ok!"))

type stored struct {
	fp     string
	status int
	body   []byte
}

type facct struct {
	ID       string `json:"id"`
	Currency string `json:"currency"`
	Flags    struct {
		DebitsMustNotExceedCredits bool `json:"debits_must_not_exceed_credits"`
		CreditsMustNotExceedDebits bool `json:"credits_must_not_exceed_debits"`
	} `json:"flags"`
	Debits    int64  `json:"debits_posted"`
	Credits   int64  `json:"credits_posted"`
	Balance   int64  `json:"balance"`
	CreatedAt string `json:"created_at"`
	entries   []fentry
}

type fentry struct {
	TransferID string `json:"transfer_id"`
	AccountID  string `json:"account_id"`
	Sequence   int64  `json:"sequence"`
	Amount     int64  `json:"amount"`
	Direction  string `json:"direction"`
	Debits     int64  `json:"debits_posted"`
	Credits    int64  `json:"credits_posted"`
	Balance    int64  `json:"balance"`
}

type ftransfer struct {
	ID         string       `json:"id"`
	Debit      string       `json:"debit_account_id"`
	Credit     string       `json:"credit_account_id"`
	Amount     int64        `json:"amount"`
	Currency   string       `json:"currency"`
	ReversesID string       `json:"reverses_id,omitempty"`
	Reason     string       `json:"reason,omitempty"`
	CreatedAt  string       `json:"created_at"`
	Reversals  []*ftransfer `json:"reversals"`
	remaining  int64
}

type fevent struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	CreatedAt   string          `json:"created_at"`
	Payload     json.RawMessage `json:"payload"`
	PublishedAt *string         `json:"published_at"`
}

func newFake(t *testing.T, b bugs) (*fake, *httptest.Server) {
	f := &fake{t: t, bugs: b, keys: map[string]stored{}, accounts: map[string]*facct{}, transfers: map[string]*ftransfer{},
		sigs: map[string]map[string]bool{}, lostIDs: map[string]bool{}}
	// The service's own standard verifier checks the tool's signatures.
	wh, err := webhook.NewVerifier(webhook.Endpoint{Name: "hooks", Provider: webhook.ProviderStandard, Secrets: []string{fakeWebhookSecret}})
	if err != nil {
		t.Fatal(err)
	}
	f.wh = wh
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/webhooks/hooks", f.webhook)
	mux.HandleFunc("POST /v1/accounts", f.post)
	mux.HandleFunc("POST /v1/transfers", f.post)
	mux.HandleFunc("POST /v1/transfers/{id}/reversals", f.post)
	mux.HandleFunc("GET /v1/accounts/{id}", f.getAccount)
	mux.HandleFunc("GET /v1/accounts/{id}/entries", f.getEntries)
	mux.HandleFunc("GET /v1/transfers/{id}", f.getTransfer)
	mux.HandleFunc("GET /v1/events", f.getEvents)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fake) now() string {
	f.n++
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(f.n) * time.Millisecond).Format(time.RFC3339Nano)
}

func writeBody(w http.ResponseWriter, status int, body []byte, replayed bool) {
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func problemBody(code string) []byte {
	return []byte(fmt.Sprintf(`{"type":"about:blank","code":%q}`+"\n", code))
}

func (f *fake) post(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(r.Body)
	if key == "" {
		writeBody(w, 400, problemBody("idempotency_key_missing"), false)
		return
	}
	fp := r.URL.Path + "\x00" + string(body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.keys[key]; ok {
		if s.fp != fp {
			writeBody(w, 422, problemBody("idempotency_key_reused"), false)
			return
		}
		out := s.body
		if f.bugs.replayDiffers {
			out = bytes.Replace(out, []byte(`"created_at":"2026`), []byte(`"created_at":"2027`), 1)
		}
		if f.bugs.doubleApply && r.PathValue("id") == "" && r.URL.Path == "/v1/transfers" && s.status == 201 {
			var t ftransfer
			_ = json.Unmarshal(s.body, &t)
			f.postEntries(&t)
		}
		writeBody(w, s.status, out, true)
		return
	}
	f.n++
	if f.bugs.flaky {
		switch f.n % 13 {
		case 0:
			w.Header().Set("Retry-After", "0")
			writeBody(w, 503, problemBody("unavailable"), false)
			return
		case 1:
			w.Header().Set("Retry-After", "0")
			writeBody(w, 409, problemBody("request_in_flight"), false)
			return
		}
	}
	var status int
	var out []byte
	switch {
	case r.URL.Path == "/v1/accounts":
		status, out = f.createAccount(body)
	case r.URL.Path == "/v1/transfers":
		status, out = f.createTransfer(body)
	default:
		status, out = f.reverse(r.PathValue("id"), body)
	}
	if f.dropping {
		f.dropping = false
		writeBody(w, status, out, false)
		return
	}
	f.keys[key] = stored{fp: fp, status: status, body: out}
	if f.bugs.flaky && f.n%7 == 0 {
		// Committed, then the connection dies before the answer: the
		// client must retry with the same key and get the replay.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
	}
	writeBody(w, status, out, false)
}

// webhook is the fake intake: verify, then dedupe by the stable
// webhook-id, write one webhook.standard.<type> event and answer 200; a
// redelivery is a replay of the stored answer.
func (f *fake) webhook(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ev, err := f.wh.Verify(r.Header, body, time.Now())
	if err != nil {
		status, code := webhook.HTTPStatus(err)
		writeBody(w, status, problemBody(code), false)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sigs[ev.ID] == nil {
		f.sigs[ev.ID] = map[string]bool{}
	}
	f.sigs[ev.ID][r.Header.Get("Webhook-Signature")] = true
	key := "webhook:" + ev.ID
	if s, ok := f.keys[key]; ok {
		if f.bugs.webhookTwice {
			f.webhookEvent(ev)
		}
		writeBody(w, s.status, s.body, true)
		return
	}
	f.n++
	if f.bugs.flaky && f.n%13 == 0 {
		w.Header().Set("Retry-After", "0")
		writeBody(w, 503, problemBody("unavailable"), false)
		return
	}
	out := mustMarshal(map[string]any{"received": true, "event_id": ev.ID})
	f.keys[key] = stored{status: 200, body: out}
	f.webhookEvent(ev)
	if f.bugs.flaky && f.n%7 == 0 {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
	}
	writeBody(w, 200, out, false)
}

func (f *fake) webhookEvent(ev webhook.Event) {
	f.event("webhook.standard."+ev.Type, mustMarshal(map[string]any{"provider": ev.Provider, "endpoint": "hooks",
		"event_id": ev.ID, "type": ev.Type, "body": json.RawMessage(ev.Body)}))
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

func (f *fake) createAccount(body []byte) (int, []byte) {
	var in struct{ ID, Currency string }
	_ = json.Unmarshal(body, &in)
	if a, ok := f.accounts[in.ID]; ok {
		return 201, mustMarshal(a)
	}
	a := &facct{ID: in.ID, Currency: in.Currency, CreatedAt: f.now()}
	f.accounts[a.ID] = a
	out := mustMarshal(a)
	f.event("account.created", out)
	return 201, out
}

func (f *fake) createTransfer(body []byte) (int, []byte) {
	var in struct {
		ID       string `json:"id"`
		Debit    string `json:"debit_account_id"`
		Credit   string `json:"credit_account_id"`
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	_ = json.Unmarshal(body, &in)
	d, c := f.accounts[in.Debit], f.accounts[in.Credit]
	if d == nil || c == nil {
		return 422, problemBody("account_not_found")
	}
	t := &ftransfer{ID: in.ID, Debit: in.Debit, Credit: in.Credit, Amount: in.Amount, Currency: in.Currency,
		CreatedAt: f.now(), remaining: in.Amount}
	if d.Currency != in.Currency || c.Currency != in.Currency {
		if f.bugs.refusedApplied {
			f.transfers[t.ID] = t
			f.postEntries(t)
		}
		return 422, problemBody("currency_mismatch")
	}
	out := mustMarshal(struct {
		*ftransfer
		Reversals []*ftransfer `json:"reversals,omitempty"`
	}{ftransfer: t})
	if f.bugs.commitLost && f.n%4 == 0 {
		f.lostIDs[t.ID], f.dropping = true, true
		return 201, out
	}
	f.event("transfer.created", out)
	if f.bugs.loseTransfer && f.n%5 == 0 {
		return 201, out
	}
	if f.bugs.wrongAmount {
		stored := *t
		stored.Amount++
		t = &stored
	}
	f.transfers[t.ID] = t
	f.postEntries(t)
	return 201, out
}

func (f *fake) reverse(id string, body []byte) (int, []byte) {
	orig := f.transfers[id]
	if orig == nil {
		return 404, problemBody("not_found")
	}
	var in struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(body, &in)
	if in.Amount > orig.remaining {
		return 422, problemBody("reversal_exceeds_remaining")
	}
	orig.remaining -= in.Amount
	t := &ftransfer{ID: in.ID, Debit: orig.Credit, Credit: orig.Debit, Amount: in.Amount, Currency: orig.Currency,
		ReversesID: orig.ID, Reason: in.Reason, CreatedAt: f.now()}
	f.transfers[t.ID] = t
	orig.Reversals = append(orig.Reversals, t)
	f.postEntries(t)
	out := mustMarshal(struct {
		*ftransfer
		Reversals []*ftransfer `json:"reversals,omitempty"`
	}{ftransfer: t})
	f.event("transfer.reversed", out)
	return 201, out
}

func (f *fake) postEntries(t *ftransfer) {
	for _, side := range []struct {
		id, dir string
	}{{t.Debit, "debit"}, {t.Credit, "credit"}} {
		a := f.accounts[side.id]
		if side.dir == "debit" {
			a.Debits += t.Amount
		} else {
			a.Credits += t.Amount
		}
		a.Balance = a.Credits - a.Debits
		a.entries = append(a.entries, fentry{TransferID: t.ID, AccountID: a.ID, Sequence: int64(len(a.entries) + 1),
			Amount: t.Amount, Direction: side.dir, Debits: a.Debits, Credits: a.Credits, Balance: a.Balance})
	}
}

func (f *fake) event(typ string, payload []byte) {
	ev := &fevent{ID: fmt.Sprintf("ev%d", len(f.events)+1), Type: typ, CreatedAt: f.now(), Payload: bytes.TrimSpace(payload)}
	k := len(f.events) + 1
	if f.bugs.eventMissing && k%10 == 0 {
		return
	}
	f.events = append(f.events, ev)
	if f.bugs.eventDoubled && k%10 == 0 {
		f.events = append(f.events, ev)
	}
	if f.js == nil {
		return
	}
	publish := func() {
		m := nats.NewMsg("idem.default." + typ)
		m.Data = ev.Payload
		m.Header.Set(nats.MsgIdHdr, ev.ID)
		if _, err := f.js.PublishMsg(m); err != nil {
			f.t.Errorf("publish %s: %v", ev.ID, err)
		}
	}
	published := func() {
		now := time.Now().UTC().Format(time.RFC3339Nano)
		f.mu.Lock()
		ev.PublishedAt = &now
		f.mu.Unlock()
	}
	switch {
	case f.bugs.natsMissing && k%10 == 0:
		now := time.Now().UTC().Format(time.RFC3339Nano)
		ev.PublishedAt = &now
	case f.bugs.natsDoubled && k <= 3:
		publish()
		go func() {
			// Past the stream's duplicate window, JetStream keeps a second
			// copy: the double publish a relay must never make.
			time.Sleep(300 * time.Millisecond)
			publish()
			published()
		}()
	default:
		publish()
		now := time.Now().UTC().Format(time.RFC3339Nano)
		ev.PublishedAt = &now
	}
}

func (f *fake) getAccount(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.accounts[r.PathValue("id")]
	if a == nil {
		writeBody(w, 404, problemBody("not_found"), false)
		return
	}
	writeBody(w, 200, mustMarshal(a), false)
}

func (f *fake) getEntries(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.accounts[r.PathValue("id")]
	if a == nil {
		writeBody(w, 404, problemBody("not_found"), false)
		return
	}
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	// A small page size of its own, so the verifier's paging is exercised.
	limit = min(max(limit, 1), 7)
	top := int64(len(a.entries))
	if after := r.URL.Query().Get("after"); after != "" {
		seq, _ := strconv.ParseInt(after, 10, 64)
		top = seq - 1
	}
	var page []fentry
	for s := top; s >= 1 && len(page) < limit; s-- {
		page = append(page, a.entries[s-1])
	}
	resp := map[string]any{"data": page, "next_cursor": nil}
	if page == nil {
		resp["data"] = []fentry{}
	}
	if len(page) == limit && page[len(page)-1].Sequence > 1 {
		resp["next_cursor"] = strconv.FormatInt(page[len(page)-1].Sequence, 10)
	}
	writeBody(w, 200, mustMarshal(resp), false)
}

func (f *fake) getTransfer(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.transferGets++
	t := f.transfers[r.PathValue("id")]
	if t == nil {
		writeBody(w, 404, problemBody("not_found"), false)
		return
	}
	c := *t
	if c.Reversals == nil {
		c.Reversals = []*ftransfer{}
	}
	writeBody(w, 200, mustMarshal(&c), false)
}

func (f *fake) getEvents(w http.ResponseWriter, r *http.Request) {
	if f.bugs.noEvents {
		writeBody(w, 404, problemBody("not_found"), false)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	after, _ := strconv.Atoi(r.URL.Query().Get("after"))
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	limit = min(max(limit, 1), 50)
	end := min(after+limit, len(f.events))
	page := []*fevent{}
	if after < end {
		page = f.events[after:end]
	}
	resp := map[string]any{"data": page, "next_cursor": nil}
	if end < len(f.events) {
		resp["next_cursor"] = strconv.Itoa(end)
	}
	writeBody(w, 200, mustMarshal(resp), false)
}
