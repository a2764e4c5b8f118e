package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"
)

// The Standard Webhooks secret: whsec_ and the base64 of 32 bytes.
var standardSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

// webhookConfig configures a Stripe endpoint in the middle of a secret
// rotation (new and old secret) and a Standard Webhooks endpoint with the
// smallest body limit, both in tenant acme.
var webhookConfig = `
webhooks:
  stripe-main:
    provider: stripe
    secrets: [whsec_new_secret, whsec_old_secret]
    tenant: acme
  std:
    provider: standard
    secrets: [` + standardSecret + `]
    tenant: acme
    max_body_bytes: 1024
`

// stripeHeaders signs body with stripe-go at ts, as Stripe does.
func stripeHeaders(secret string, ts time.Time, body string) []string {
	p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: []byte(body), Secret: secret, Timestamp: ts})
	return []string{"Stripe-Signature", p.Header}
}

// standardHeaders signs body with the Standard Webhooks reference library.
func standardHeaders(t *testing.T, id string, ts time.Time, body string) []string {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(standardSecret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(id, ts, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"webhook-id", id, "webhook-timestamp", fmt.Sprint(ts.Unix()), "webhook-signature", sig}
}

// Provider deliveries, signed by the providers' own libraries, through the
// built binary: a redelivery (new timestamp, new signature, rotated secret)
// and 20 concurrent copies each make one stored event, one entry in GET
// /v1/events and one stream message; forged, stale, oversized and
// misaddressed deliveries store nothing; the counters say what happened.
func TestWebhooks(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		const acmeKey = "acme-api-key-00000001"
		auth := []string{"Authorization", "Bearer " + acmeKey}
		cfgPath := filepath.Join(t.TempDir(), "idem.yaml")
		if err := os.WriteFile(cfgPath, []byte(webhookConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		natsURL, stream := startNATS(t)
		const adminKey = "admin-key-for-metrics-01"
		p, _ := serveDB(t, dialect, []string{"IDEM_API_KEYS=acme:" + acmeKey, "IDEM_ADMIN_KEY=" + adminKey}, "--publish", natsURL, "--config", cfgPath)
		stripeURL := p.URL + "/v1/webhooks/stripe-main"
		now := time.Now()

		// First delivery, signed by the old secret (still configured while
		// it rotates); the redelivery four minutes later by the new one.
		paid := `{"id":"evt_1","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","amount_paid":1200}}}`
		r := call(t, "POST", stripeURL, "", paid, stripeHeaders("whsec_old_secret", now.Add(-4*time.Minute), paid)...)
		mustStatus(t, r, 200)
		if r.Header.Get("Idempotent-Replayed") != "" || r.json(t)["event_id"] != "evt_1" || r.json(t)["received"] != true {
			t.Fatalf("first delivery: %v %s", r.Header, r.Body)
		}
		again := call(t, "POST", stripeURL, "", paid, stripeHeaders("whsec_new_secret", now, paid)...)
		mustStatus(t, again, 200)
		if again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(r.Body) {
			t.Fatalf("redelivery: %v %s", again.Header, again.Body)
		}

		// Tampered body: the signature was made over other bytes.
		forged := strings.Replace(`{"id":"evt_forged","type":"invoice.paid","amount":1}`, "1}", "1000000}", 1)
		r = call(t, "POST", stripeURL, "", forged, stripeHeaders("whsec_new_secret", now, `{"id":"evt_forged","type":"invoice.paid","amount":1}`)...)
		if r.Status != 401 || r.code(t) != "signature_invalid" {
			t.Fatalf("tampered: %d %s", r.Status, r.Body)
		}
		// Stale: signed ten minutes ago, Stripe's tolerance is five.
		stale := `{"id":"evt_stale","type":"invoice.paid"}`
		r = call(t, "POST", stripeURL, "", stale, stripeHeaders("whsec_new_secret", now.Add(-10*time.Minute), stale)...)
		if r.Status != 401 || r.code(t) != "timestamp_stale" {
			t.Fatalf("stale: %d %s", r.Status, r.Body)
		}
		// No signature at all.
		r = call(t, "POST", stripeURL, "", stale)
		if r.Status != 401 || r.code(t) != "signature_missing" {
			t.Fatalf("unsigned: %d %s", r.Status, r.Body)
		}

		// 20 copies at once, each with its own timestamp and signature: one
		// first, nineteen replays, all 200.
		conc := `{"id":"evt_conc","object":"event","type":"charge.succeeded","data":{"object":{"id":"ch_1"}}}`
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			codes = map[string]int{}
		)
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := call(t, "POST", stripeURL, "", conc, stripeHeaders("whsec_new_secret", now.Add(-time.Duration(i)*time.Second), conc)...)
				mu.Lock()
				defer mu.Unlock()
				codes[fmt.Sprintf("%d replayed=%q", r.Status, r.Header.Get("Idempotent-Replayed"))]++
			}()
		}
		wg.Wait()
		if codes[`200 replayed=""`] != 1 || codes[`200 replayed="true"`] != 19 {
			t.Fatalf("20 concurrent copies answered %v", codes)
		}

		// Standard Webhooks: the id is webhook-id; the redelivery has a new
		// timestamp and so a new signature.
		stdURL := p.URL + "/v1/webhooks/std"
		stdBody := `{"type":"user.created","data":{"user":"u_1"}}`
		mustStatus(t, call(t, "POST", stdURL, "", stdBody, standardHeaders(t, "msg_1", now.Add(-time.Minute), stdBody)...), 200)
		r = call(t, "POST", stdURL, "", stdBody, standardHeaders(t, "msg_1", now, stdBody)...)
		if r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("standard redelivery: %d %v", r.Status, r.Header)
		}
		big := `{"type":"user.created","pad":"` + strings.Repeat("x", 2000) + `"}`
		r = call(t, "POST", stdURL, "", big, standardHeaders(t, "msg_big", now, big)...)
		if r.Status != 413 || r.code(t) != "body_too_large" {
			t.Fatalf("oversize: %d %s", r.Status, r.Body)
		}

		// Unknown endpoint: 404, never 410 (senders disable on 410).
		r = call(t, "POST", p.URL+"/v1/webhooks/nope", "", paid, stripeHeaders("whsec_new_secret", now, paid)...)
		if r.Status != 404 || r.code(t) != "not_found" {
			t.Fatalf("unknown endpoint: %d %s", r.Status, r.Body)
		}

		// One event per stable id, in the endpoint's tenant, each published.
		var events []event
		waitFor(t, func() bool {
			events = allEvents(t, p.URL, auth...)
			if len(events) != 3 {
				return false
			}
			for _, e := range events {
				if e.PublishedAt == nil {
					return false
				}
			}
			return true
		})
		wantTypes := []string{"webhook.stripe.invoice.paid", "webhook.stripe.charge.succeeded", "webhook.standard.user.created"}
		for i, e := range events {
			if e.Type != wantTypes[i] {
				t.Fatalf("event %d is %s, want %s", i, e.Type, wantTypes[i])
			}
		}
		var payload struct {
			Provider string          `json:"provider"`
			EventID  string          `json:"event_id"`
			Type     string          `json:"type"`
			Body     json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(events[0].Payload, &payload); err != nil {
			t.Fatal(err)
		}
		if payload.Provider != "stripe" || payload.EventID != "evt_1" || payload.Type != "invoice.paid" || !sameJSON(t, payload.Body, paid) {
			t.Fatalf("payload %s", events[0].Payload)
		}
		if r := call(t, "GET", p.URL+"/v1/events", "", nil, "Authorization", "Bearer nobody-at-all-0001"); r.Status != 401 {
			t.Fatalf("a caller without acme's key reads its events: %d", r.Status)
		}

		msgs := stream()
		if len(msgs) != 3 {
			t.Fatalf("stream holds %d messages, want 3", len(msgs))
		}
		for i, m := range msgs {
			if m.Header.Get("Nats-Msg-Id") != events[i].ID || m.Subject != "idem.acme."+wantTypes[i] {
				t.Fatalf("message %d: %s %s, want %s", i, m.Subject, m.Header.Get("Nats-Msg-Id"), events[i].ID)
			}
		}

		// With API keys, /metrics on --addr takes the admin key.
		metrics := string(call(t, "GET", p.URL+"/metrics", "", nil, "Authorization", "Bearer "+adminKey).Body)
		for _, want := range []string{
			`idem_webhook_deliveries_total{endpoint="stripe-main",outcome="first"} 2`,
			`idem_webhook_deliveries_total{endpoint="stripe-main",outcome="replayed"} 20`,
			`idem_webhook_deliveries_total{endpoint="stripe-main",outcome="rejected_signature_invalid"} 1`,
			`idem_webhook_deliveries_total{endpoint="stripe-main",outcome="rejected_timestamp_stale"} 1`,
			`idem_webhook_deliveries_total{endpoint="stripe-main",outcome="rejected_signature_missing"} 1`,
			`idem_webhook_deliveries_total{endpoint="std",outcome="first"} 1`,
			`idem_webhook_deliveries_total{endpoint="std",outcome="replayed"} 1`,
			`idem_webhook_deliveries_total{endpoint="std",outcome="rejected_body_too_large"} 1`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func sameJSON(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
