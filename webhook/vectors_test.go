package webhook

import (
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestDocumentedVectors checks the profiles against the test values the
// senders publish, so the schemes the tests sign with are the senders'
// schemes, not this package's reading of them.
func TestDocumentedVectors(t *testing.T) {
	t.Parallel()

	// The Standard Webhooks specification's example (also the reference
	// library's TestWebhookSign).
	t.Run("standard", func(t *testing.T) {
		t.Parallel()
		const (
			secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
			id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
			sig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
			body   = `{"test": 2432232314}`
		)
		ts := time.Unix(1614265330, 0)
		// The reference signer used throughout the tests reproduces it ...
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := wh.Sign(id, ts, []byte(body)); got != sig {
			t.Fatalf("reference signer gives %s", got)
		}
		// ... so does SignStandard, the publisher's signer ...
		key, err := standardKey(secret)
		if err != nil {
			t.Fatal(err)
		}
		if got := SignStandard(key, id, ts.Unix(), []byte(body)); got != sig {
			t.Fatalf("SignStandard gives %s", got)
		}
		// ... and the verifier accepts it, also among other signatures.
		v := mustVerifier(t, Endpoint{Name: "std", Provider: "standard", Secrets: []string{secret}})
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", "1614265330")
		h.Set("webhook-signature", "v1a,c29tZXRoaW5nIGVsc2U= v1,bm90IHRoaXMgb25l "+sig)
		ev, err := v.Verify(h, []byte(body), ts)
		if err != nil || ev.ID != id {
			t.Fatalf("Verify = %+v, %v", ev, err)
		}
		// svix-* names are the same scheme.
		s := http.Header{}
		s.Set("svix-id", id)
		s.Set("svix-timestamp", "1614265330")
		s.Set("svix-signature", sig)
		if ev, err := v.Verify(s, []byte(body), ts); err != nil || ev.ID != id {
			t.Fatalf("svix headers: %+v, %v", ev, err)
		}
	})

	// GitHub's "Validating webhook deliveries" test values.
	t.Run("github", func(t *testing.T) {
		t.Parallel()
		v := mustVerifier(t, Endpoint{Name: "gh", Provider: "github", Secrets: []string{"It's a Secret to Everybody"}})
		h := http.Header{}
		h.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
		h.Set("X-GitHub-Hook-ID", "1")
		h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		ev, err := v.Verify(h, []byte("Hello, World!"), time.Now())
		if err != nil || ev.ID != "1:72d3162e-cc78-11e3-81ab-4c9367dc0958" {
			t.Fatalf("Verify = %+v, %v", ev, err)
		}
		if got := signGitHub([]string{"It's a Secret to Everybody"}, delivery{body: []byte("Hello, World!")}); got.Get("X-Hub-Signature-256") != h.Get("X-Hub-Signature-256") {
			t.Fatal("the test signer disagrees with GitHub's vector")
		}
	})

	// Slack's "Verifying requests from Slack" walkthrough: a slash command,
	// form-encoded. The signature verifies; the body is not an Events API
	// event, so it is then refused as malformed, not as forged.
	t.Run("slack", func(t *testing.T) {
		t.Parallel()
		const body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
		const secret = "8f742231b10e8888abcd99yyyzzz85a5"
		v := mustVerifier(t, Endpoint{Name: "slack", Provider: "slack", Secrets: []string{secret}})
		h := http.Header{}
		h.Set("X-Slack-Request-Timestamp", "1531420618")
		h.Set("X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
		_, err := v.Verify(h, []byte(body), time.Unix(1531420618, 0))
		wantErr(t, err, ErrMalformedBody)
		_, err = v.Verify(h, []byte(strings.Replace(body, "foobar", "foobaz", 1)), time.Unix(1531420618, 0))
		wantErr(t, err, ErrSignatureInvalid)
		if got := signSlack([]string{secret}, delivery{body: []byte(body), ts: time.Unix(1531420618, 0)}); got.Get("X-Slack-Signature") != h.Get("X-Slack-Signature") {
			t.Fatal("the test signer disagrees with Slack's vector")
		}
	})
}

func TestSlackURLVerification(t *testing.T) {
	t.Parallel()
	v := mustVerifier(t, Endpoint{Name: "slack", Provider: "slack", Secrets: []string{"s"}})
	body := []byte(`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	ev, err := v.Verify(signSlack([]string{"s"}, delivery{body: body, ts: t0}), body, t0)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Challenge != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" || ev.ID != "" || ev.Type != "url_verification" {
		t.Fatalf("event = %+v", ev)
	}
	// An unsigned challenge is refused like any other forgery.
	_, err = v.Verify(signSlack([]string{"other"}, delivery{body: body, ts: t0}), body, t0)
	wantErr(t, err, ErrSignatureInvalid)
}

func TestShopifyFallsBackToWebhookID(t *testing.T) {
	t.Parallel()
	v := mustVerifier(t, Endpoint{Name: "shop", Provider: "shopify", Secrets: []string{"k"}})
	body := []byte(`{"id":1}`)
	h := signShopify([]string{"k"}, delivery{body: body, ts: t0})
	h.Set("X-Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
	ev, err := v.Verify(h, body, t0)
	if err != nil || ev.ID != "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043" {
		t.Fatalf("Verify = %+v, %v", ev, err)
	}
	h.Set("X-Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5")
	if ev, _ := v.Verify(h, body, t0); ev.ID != "98880550-7158-44d4-b7cd-2c97c8a091b5" {
		t.Fatalf("X-Shopify-Event-Id should win, got %q", ev.ID)
	}
}

// TestHMACBodyID covers the generic profile's other shape: SHA-1, hex, a
// prefix, no timestamp, the id and type read from the JSON body (a number
// id is taken as its literal).
func TestHMACBodyID(t *testing.T) {
	t.Parallel()
	cfg := &HMACConfig{Header: "X-Sig", Algorithm: "sha1", Prefix: "sha1=", IDField: "data.id", TypeField: "kind"}
	v := mustVerifier(t, Endpoint{Name: "legacy", Provider: "hmac", Secrets: []string{"k"}, HMAC: cfg})
	for _, tc := range []struct {
		body, id, typ string
		err           error
	}{
		{`{"kind":"a.b","data":{"id":"x-1"}}`, "x-1", "a.b", nil},
		{`{"kind":"a.b","data":{"id":12345}}`, "12345", "a.b", nil},
		{`{"kind":"a.b","data":{"id":null}}`, "", "", ErrEventIDMissing},
		{`{"kind":"a.b","data":"flat"}`, "", "", ErrEventIDMissing},
		{`[1,2]`, "", "", ErrMalformedBody},
		{`null`, "", "", ErrMalformedBody},
	} {
		h := http.Header{}
		h.Set("X-Sig", "sha1="+hexSHA1("k", tc.body))
		ev, err := v.Verify(h, []byte(tc.body), t0)
		if tc.err != nil {
			wantErr(t, err, tc.err)
			continue
		}
		if err != nil || ev.ID != tc.id || ev.Type != tc.typ || !ev.Timestamp.IsZero() {
			t.Fatalf("%s: %+v, %v", tc.body, ev, err)
		}
	}
	// Without the prefix the signature is not in the expected form.
	h := http.Header{}
	h.Set("X-Sig", hexSHA1("k", `{}`))
	_, err := v.Verify(h, []byte(`{}`), t0)
	wantErr(t, err, ErrSignatureInvalid)
}
