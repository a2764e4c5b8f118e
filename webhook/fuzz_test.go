package webhook

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// fuzzProfile checks two properties of a profile's header parsing: any
// header value is refused or accepted without a panic, and a header the
// sender's signer produces for any body always passes the signature and
// timestamp checks (the body may still lack an id).
func fuzzProfile(f *testing.F, c profileCase, seeds ...string) {
	for _, s := range seeds {
		f.Add(s, []byte(`{"id":"evt_1","event_id":"e1","type":"t"}`))
	}
	v := mustVerifier(f, c.ep)
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		if len(body) > defaultMaxBodyBytes {
			return
		}
		h := http.Header{}
		h.Set(c.sigHeader, header)
		h.Set("Webhook-Id", "msg_1")
		h.Set("Webhook-Timestamp", "1790000000")
		h.Set("X-Slack-Request-Timestamp", "1790000000")
		h.Set("X-Acme-Timestamp", "1790000000")
		h.Set("X-Acme-Event-Id", "a1")
		_, _ = v.Verify(h, body, t0)

		signed := c.sign(c.ep.Secrets, delivery{body: body, ts: t0, id: "msg_1"})
		_, err := v.Verify(signed, body, t0.Add(time.Second))
		if errors.Is(err, ErrSignatureInvalid) || errors.Is(err, ErrSignatureMissing) || errors.Is(err, ErrTimestampStale) {
			t.Fatalf("signer's own header refused: %v (%v)", err, signed)
		}
	})
}

func caseNamed(name string) profileCase {
	for _, c := range profileCases() {
		if c.name == name {
			return c
		}
	}
	panic(name)
}

func FuzzStripeHeader(f *testing.F) {
	f.Add("t=1790000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39", []byte(`{}`))
	f.Add("t=1,t=2,v1=00", []byte(`{}`))
	f.Add("v1=zz,t=", []byte(``))
	fuzzProfile(f, caseNamed("stripe"), ",,,", "t==1,v1==")
}

func FuzzStandardHeader(f *testing.F) {
	fuzzProfile(f, caseNamed("standard"), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "v1a,xx v1,", "  v1,,, v2,a")
}

func FuzzPaddleHeader(f *testing.F) {
	fuzzProfile(f, caseNamed("paddle"), "ts=1671552777;h1=eb4d0dc8853be92b7f063b9f3ba5233eb920a09459b6e6b2c26705b4364db151", ";;", "ts=;h1=;h1=zz")
}

func FuzzSlackHeader(f *testing.F) {
	fuzzProfile(f, caseNamed("slack"), "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503", "v0=", "v1=00")
}

func FuzzGitHubHeader(f *testing.F) {
	fuzzProfile(f, caseNamed("github"), "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "sha256=", "sha1=00")
}

func FuzzShopifyHeader(f *testing.F) {
	fuzzProfile(f, caseNamed("shopify"), "XWmrwMey6OsLMeiZKwP4FppHH3cmAiiJJAweH5Jo4bM=", "====", "")
}

func FuzzSquareHeader(f *testing.F) {
	fuzzProfile(f, caseNamed("square"), "2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og=", "@@", "")
}

func FuzzHMACHeader(f *testing.F) {
	fuzzProfile(f, caseNamed("hmac"), "v1=AAAA,v1=BBBB", ",,,,", "v1=")
}
