// Package webhook_test checks the webhook package's Stripe verifier against
// stripe-go, Stripe's own Go library. It lives in the idem binary's module so
// that the library's module does not require stripe-go; the webhook
// package's own tests sign Stripe deliveries from the documented scheme.
package webhook_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemhq/idem/webhook"
)

// stripeHeader signs body with stripe-go, one v1 entry per secret in one
// header, as Stripe does while a secret is rolled.
func stripeHeader(secrets []string, body []byte, ts time.Time) http.Header {
	var parts []string
	for i, s := range secrets {
		p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: body, Secret: s, Timestamp: ts})
		t, v1, _ := strings.Cut(p.Header, ",")
		if i == 0 {
			parts = append(parts, t)
		}
		parts = append(parts, v1)
	}
	h := http.Header{}
	h.Set("Stripe-Signature", strings.Join(parts, ","))
	return h
}

// A delivery stripe-go signs is accepted under either secret of a rolled
// endpoint, with the body's id as the event's, and refused under a secret
// the endpoint does not hold.
func TestStripeGoSignatures(t *testing.T) {
	t.Parallel()
	v, err := webhook.NewVerifier(webhook.Endpoint{Name: "stripe-main", Provider: "stripe",
		Secrets: []string{"whsec_old_secret", "whsec_new_secret"}})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`)
	now := time.Now()
	ts := now.Add(-time.Minute)
	for _, c := range []struct {
		name    string
		secrets []string
		want    error
	}{
		{"old secret", []string{"whsec_old_secret"}, nil},
		{"new secret", []string{"whsec_new_secret"}, nil},
		{"both, while rolled", []string{"whsec_old_secret", "whsec_new_secret"}, nil},
		{"another endpoint's", []string{"whsec_attacker"}, webhook.ErrSignatureInvalid},
	} {
		ev, err := v.Verify(stripeHeader(c.secrets, body, ts), body, now)
		if c.want != nil {
			if !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if ev.ID != "evt_1" || ev.Type != "payment_intent.succeeded" || !ev.Timestamp.Equal(ts.Truncate(time.Second)) {
			t.Errorf("%s: event %q %q at %s", c.name, ev.ID, ev.Type, ev.Timestamp)
		}
	}
}
