package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// profileCase describes one provider for the shared profile tests.
type profileCase struct {
	name      string
	ep        Endpoint // Secrets: [old, new]
	body      func(id string) []byte
	headerID  bool // the stable id travels in a header, not the body
	parses    bool // the profile reads the JSON body
	sign      func(secrets []string, d delivery) http.Header
	multi     bool   // several signatures fit in one header
	sigHeader string // the header a "missing signature" test removes
	timed     bool
	wantType  string
	idPrefix  string // what the profile puts before the sender's id
}

const (
	standardOld = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	standardNew = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	standardBad = "whsec_c2VjcmV0LW9mLWFub3RoZXItZW5kcG9pbnQ="
)

func profileCases() []profileCase {
	jsonBody := func(format string) func(id string) []byte {
		return func(id string) []byte { return []byte(fmt.Sprintf(format, id)) }
	}
	return []profileCase{
		{
			name: "stripe",
			ep:   Endpoint{Name: "stripe-main", Provider: "stripe", Secrets: []string{"whsec_old_secret", "whsec_new_secret"}},
			// A future API version and unknown fields must not refuse it.
			body:   jsonBody(`{"id":%q,"object":"event","api_version":"2099-01-01.future","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","brand_new_field":true}}}`),
			parses: true, sign: signStripe, multi: true, sigHeader: "Stripe-Signature", timed: true,
			wantType: "payment_intent.succeeded",
		},
		{
			name: "standard",
			ep:   Endpoint{Name: "std", Provider: "standard", Secrets: []string{standardOld, standardNew}},
			body: func(string) []byte {
				return []byte(`{"type":"invoice.paid","timestamp":"2026-11-29T10:00:00Z","data":{"id":"inv_1"}}`)
			},
			headerID: true, parses: true, sign: signStandard, multi: true, sigHeader: "Webhook-Signature", timed: true,
			wantType: "invoice.paid",
		},
		{
			name:     "github",
			ep:       Endpoint{Name: "gh", Provider: "github", Secrets: []string{"gh-old", "gh-new"}},
			body:     func(string) []byte { return []byte(`{"ref":"refs/heads/main","after":"abc"}`) },
			headerID: true, sign: signGitHub, sigHeader: "X-Hub-Signature-256", wantType: "push",
			idPrefix: "424242:",
		},
		{
			name:     "shopify",
			ep:       Endpoint{Name: "shop", Provider: "shopify", Secrets: []string{"shp-old", "shp-new"}},
			body:     func(string) []byte { return []byte(`{"id":820982911946154508,"email":"jon@example.com"}`) },
			headerID: true, sign: signShopify, sigHeader: "X-Shopify-Hmac-Sha256", wantType: "orders/create",
		},
		{
			name:   "slack",
			ep:     Endpoint{Name: "slack", Provider: "slack", Secrets: []string{"slack-old", "slack-new"}},
			body:   jsonBody(`{"token":"x","team_id":"T1","type":"event_callback","event_id":%q,"event_time":1,"event":{"type":"app_mention","text":"hi"}}`),
			parses: true, sign: signSlack, sigHeader: "X-Slack-Signature", timed: true,
			wantType: "app_mention",
		},
		{
			name:   "square",
			ep:     Endpoint{Name: "square-main", Provider: "square", Secrets: []string{"sq-old", "sq-new"}, URL: squareURL},
			body:   jsonBody(`{"merchant_id":"M1","type":"payment.updated","event_id":%q,"data":{"type":"payment","id":"p1"}}`),
			parses: true, sign: signSquare, sigHeader: "X-Square-Hmacsha256-Signature",
			wantType: "payment.updated",
		},
		{
			name:   "paddle",
			ep:     Endpoint{Name: "paddle", Provider: "paddle", Secrets: []string{"pdl_ntfset_old", "pdl_ntfset_new"}},
			body:   jsonBody(`{"event_id":%q,"event_type":"transaction.completed","occurred_at":"2026-11-29T10:00:00Z","notification_id":"ntf_1","data":{}}`),
			parses: true, sign: signPaddle, multi: true, sigHeader: "Paddle-Signature", timed: true,
			wantType: "transaction.completed",
		},
		{
			name:     "hmac",
			ep:       Endpoint{Name: "acme", Provider: "hmac", Secrets: []string{"acme-old", "acme-new"}, HMAC: &acmeHMAC},
			body:     func(string) []byte { return []byte(`{"event":{"kind":"widget.created"},"widget":{"id":7}}`) },
			headerID: true, parses: true, sign: signAcme, multi: true, sigHeader: "X-Acme-Signature", timed: true,
			wantType: "widget.created",
		},
	}
}

// bodyWithoutID is the body of a case whose id travels in the body, with
// the id field left out.
func (c profileCase) bodyWithoutID() []byte {
	b := c.body("")
	for _, f := range []string{`"id":"",`, `"event_id":"",`} {
		b = bytes.Replace(b, []byte(f), nil, 1)
	}
	return b
}

func mustVerifier(t testing.TB, e Endpoint) Verifier {
	t.Helper()
	v, err := NewVerifier(e)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func wantErr(t *testing.T, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("error = %v, want %v", err, sentinel)
	}
	var we *Error
	if !errors.As(err, &we) || we.Code == "" {
		t.Fatalf("error %v is not an *Error with a code", err)
	}
}

var t0 = time.Unix(1_790_000_000, 0)

func TestProfiles(t *testing.T) {
	t.Parallel()
	for _, c := range profileCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := mustVerifier(t, c.ep)
			old, nw := c.ep.Secrets[:1], c.ep.Secrets[1:]
			const id = "evt_1NG8Du2eZvKYlo2CWNg4Qsr9"
			first := delivery{body: c.body(id), ts: t0, id: id}

			t.Run("valid", func(t *testing.T) {
				ev, err := v.Verify(c.sign(old, first), first.body, t0.Add(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if ev.ID != c.idPrefix+id || ev.Type != c.wantType || ev.Provider != c.ep.Provider || ev.Endpoint != c.ep.Name {
					t.Fatalf("event = %+v", ev)
				}
				if !bytes.Equal(ev.Body, first.body) {
					t.Fatal("body is not the raw body")
				}
				if c.timed != !ev.Timestamp.IsZero() || (c.timed && !ev.Timestamp.Equal(t0)) {
					t.Fatalf("timestamp = %v", ev.Timestamp)
				}
				if ev.Header.Get(c.sigHeader) != "" {
					t.Fatal("event header keeps the signature")
				}
			})

			// The point of the package: the sender resends the same event
			// later, signed anew (new timestamp where signed, and here the
			// rotated secret so the signature differs for every scheme),
			// and it must be named the same.
			t.Run("redelivery keeps the id", func(t *testing.T) {
				later := delivery{body: c.body(id), ts: t0.Add(3 * time.Minute), id: id}
				h1, h2 := c.sign(old, first), c.sign(nw, later)
				if h1.Get(c.sigHeader) == h2.Get(c.sigHeader) {
					t.Fatal("test is wrong: the redelivery carries the same signature")
				}
				e1, err := v.Verify(h1, first.body, first.ts.Add(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				e2, err := v.Verify(h2, later.body, later.ts.Add(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if e1.ID != e2.ID || DedupeKey(c.ep, e1) != DedupeKey(c.ep, e2) {
					t.Fatalf("ids differ: %q, %q", e1.ID, e2.ID)
				}
				if c.timed && e1.Timestamp.Equal(e2.Timestamp) {
					t.Fatal("timestamps should differ")
				}
			})

			t.Run("tampered body", func(t *testing.T) {
				h := c.sign(old, first)
				tampered := bytes.Replace(first.body, []byte("{"), []byte("{ "), 1)
				_, err := v.Verify(h, tampered, t0)
				wantErr(t, err, ErrSignatureInvalid)
			})

			t.Run("rotation", func(t *testing.T) {
				for _, secret := range c.ep.Secrets {
					if _, err := v.Verify(c.sign([]string{secret}, first), first.body, t0); err != nil {
						t.Fatalf("secret %q: %v", secret, err)
					}
				}
				foreign := "foreign-secret"
				if c.ep.Provider == "standard" {
					foreign = standardBad
				}
				_, err := v.Verify(c.sign([]string{foreign}, first), first.body, t0)
				wantErr(t, err, ErrSignatureInvalid)
				if c.multi {
					// Two signatures in one header, only the second one known.
					if _, err := v.Verify(c.sign([]string{foreign, c.ep.Secrets[1]}, first), first.body, t0); err != nil {
						t.Fatalf("several signatures: %v", err)
					}
				}
			})

			t.Run("missing signature", func(t *testing.T) {
				h := c.sign(old, first)
				h.Del(c.sigHeader)
				_, err := v.Verify(h, first.body, t0)
				wantErr(t, err, ErrSignatureMissing)
			})

			t.Run("missing id", func(t *testing.T) {
				d := first
				if c.headerID {
					d.id = ""
				} else {
					d.body = c.bodyWithoutID()
				}
				_, err := v.Verify(c.sign(old, d), d.body, t0)
				wantErr(t, err, ErrEventIDMissing)
			})

			if c.parses {
				t.Run("malformed body", func(t *testing.T) {
					d := first
					d.body = []byte("not json")
					_, err := v.Verify(c.sign(old, d), d.body, t0)
					wantErr(t, err, ErrMalformedBody)
				})
			}

			t.Run("body over the limit", func(t *testing.T) {
				d := first
				d.body = bytes.Repeat([]byte("x"), defaultMaxBodyBytes+1)
				_, err := v.Verify(c.sign(old, d), d.body, t0)
				wantErr(t, err, ErrBodyTooLarge)
			})

			if !c.timed {
				return
			}
			t.Run("stale timestamp", func(t *testing.T) {
				tol := c.ep.withDefaults().Tolerance
				h := c.sign(old, first)
				for _, now := range []time.Time{t0.Add(tol + time.Second), t0.Add(-tol - time.Second)} {
					_, err := v.Verify(h, first.body, now)
					wantErr(t, err, ErrTimestampStale)
				}
				for _, now := range []time.Time{t0.Add(tol), t0.Add(-tol)} {
					if _, err := v.Verify(h, first.body, now); err != nil {
						t.Fatalf("at the edge of the tolerance: %v", err)
					}
				}
			})
		})
	}
}
