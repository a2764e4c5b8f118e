package webhook

// Senders' signing code for the tests. Standard Webhooks signs with its
// reference library, so the verifier is checked against the real client.
// Stripe is signed here from its documented scheme, like the providers that
// publish no Go signer: stripe-go would put the whole Stripe SDK into this
// module's requirements, and every user's with them. The Stripe verifier is
// checked against stripe-go's GenerateTestSignedPayload in the idem
// binary's module (cmd/idem/internal/integration/webhook). GitHub, Shopify,
// Slack, Square and Paddle publish no Go signer; GitHub's and Slack's
// documented test vectors pin their schemes down (TestDocumentedVectors).

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// delivery is one attempt at sending an event.
type delivery struct {
	body []byte
	ts   time.Time
	id   string // the stable id, for profiles that carry it in a header
}

func macSHA256(secret string, parts ...string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// signStripe signs as Stripe documents it, one v1 entry per secret in one
// header, as Stripe does while a secret is rolled: v1 is the hex
// HMAC-SHA256 of "<t>.<body>" keyed by the secret's bytes, whsec_ included.
func signStripe(secrets []string, d delivery) http.Header {
	t := fmt.Sprint(d.ts.Unix())
	parts := []string{"t=" + t}
	for _, s := range secrets {
		parts = append(parts, "v1="+hex.EncodeToString(macSHA256(s, t, ".", string(d.body))))
	}
	h := http.Header{}
	h.Set("Stripe-Signature", strings.Join(parts, ","))
	return h
}

// signStandard signs with the Standard Webhooks reference library.
func signStandard(secrets []string, d delivery) http.Header {
	var sigs []string
	for _, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			panic(err)
		}
		sig, err := wh.Sign(d.id, d.ts, d.body)
		if err != nil {
			panic(err)
		}
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	if d.id != "" {
		h.Set(standardwebhooks.HeaderWebhookID, d.id)
	}
	h.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(d.ts.Unix()))
	h.Set(standardwebhooks.HeaderWebhookSignature, strings.Join(sigs, " "))
	return h
}

// signGitHub follows "Validating webhook deliveries": sha256=<hex HMAC of
// the body>. It signs with the first secret: GitHub sends one signature.
func signGitHub(secrets []string, d delivery) http.Header {
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(macSHA256(secrets[0], string(d.body))))
	h.Set("X-GitHub-Event", "push")
	h.Set("X-GitHub-Hook-ID", "424242")
	if d.id != "" {
		h.Set("X-GitHub-Delivery", d.id)
	}
	return h
}

// signShopify: base64 HMAC-SHA256 of the body. X-Shopify-Webhook-Id is made
// different on every attempt, so a test keyed on it would fail.
func signShopify(secrets []string, d delivery) http.Header {
	h := http.Header{}
	h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(macSHA256(secrets[0], string(d.body))))
	h.Set("X-Shopify-Topic", "orders/create")
	h.Set("X-Shopify-Shop-Domain", "example.myshopify.com")
	if d.id != "" {
		h.Set("X-Shopify-Event-Id", d.id)
		h.Set("X-Shopify-Webhook-Id", fmt.Sprintf("wh-%d", d.ts.UnixNano()))
	}
	return h
}

// signSlack follows "Verifying requests from Slack": v0=<hex HMAC of
// v0:<timestamp>:<body>>.
func signSlack(secrets []string, d delivery) http.Header {
	ts := fmt.Sprint(d.ts.Unix())
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", ts)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(macSHA256(secrets[0], "v0:", ts, ":", string(d.body))))
	return h
}

const squareURL = "https://example.com/v1/webhooks/square-main"

// signSquare follows Square's "Validate notifications": base64 HMAC-SHA256
// of the notification URL followed by the body.
func signSquare(secrets []string, d delivery) http.Header {
	h := http.Header{}
	h.Set("X-Square-Hmacsha256-Signature", base64.StdEncoding.EncodeToString(macSHA256(secrets[0], squareURL, string(d.body))))
	return h
}

// signPaddle follows Paddle's "Verify webhook signatures": ts=<unix>;h1=<hex
// HMAC of ts:body>, one h1 per secret while secrets rotate.
func signPaddle(secrets []string, d delivery) http.Header {
	ts := fmt.Sprint(d.ts.Unix())
	parts := []string{"ts=" + ts}
	for _, s := range secrets {
		parts = append(parts, "h1="+hex.EncodeToString(macSHA256(s, ts, ":", string(d.body))))
	}
	h := http.Header{}
	h.Set("Paddle-Signature", strings.Join(parts, ";"))
	return h
}

// acmeHMAC is the generic profile's test scheme: SHA-512, base64, prefix
// "v1=", several signatures separated by ",", over
// "<timestamp>.<id>.<body>"; id in a header, type in the body.
var acmeHMAC = HMACConfig{
	Header: "X-Acme-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "v1=", Separator: ",",
	TimestampHeader: "X-Acme-Timestamp", SignedPayload: "{timestamp}.{id}.{body}",
	IDHeader: "X-Acme-Event-Id", TypeField: "event.kind",
}

func signAcme(secrets []string, d delivery) http.Header {
	ts := fmt.Sprint(d.ts.Unix())
	var sigs []string
	for _, s := range secrets {
		m := hmac.New(sha512.New, []byte(s))
		m.Write([]byte(ts + "." + d.id + "."))
		m.Write(d.body)
		sigs = append(sigs, "v1="+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	h := http.Header{}
	h.Set("X-Acme-Timestamp", ts)
	h.Set("X-Acme-Signature", strings.Join(sigs, ","))
	if d.id != "" {
		h.Set("X-Acme-Event-Id", d.id)
	}
	return h
}

func hexSHA1(secret, body string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}
