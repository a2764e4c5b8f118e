package webhook

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	good := `
server: {addr: 127.0.0.1:8080}   # another block: left alone
webhooks:
  stripe-main:
    provider: stripe
    secrets: ["whsec_old", "whsec_new"]
    tenant: acme
    tolerance: 10m
  gh:
    provider: github
    secrets: [s3cret]
  sq:
    provider: square
    secrets: [k]
    url: https://example.com/v1/webhooks/sq
  custom:
    provider: hmac
    secrets: [k]
    hmac:
      header: X-Sig
      algorithm: sha512
      encoding: base64
      timestamp_header: X-Ts
      id_field: data.id
      type_header: X-Type
`
	eps, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	s := eps["stripe-main"]
	if len(eps) != 4 || s.Name != "stripe-main" || s.Tenant != "acme" || s.Tolerance != 10*time.Minute ||
		len(s.Secrets) != 2 || s.MaxBodyBytes != defaultMaxBodyBytes {
		t.Fatalf("stripe-main = %+v", s)
	}
	if g := eps["gh"]; g.Tenant != "default" || g.Tolerance != 0 {
		t.Fatalf("gh = %+v", g)
	}
	c := eps["custom"]
	if c.Tolerance != DefaultHMACTolerance || c.HMAC.SignedPayload != "{timestamp}.{body}" || c.HMAC.Algorithm != "sha512" {
		t.Fatalf("custom = %+v %+v", c, c.HMAC)
	}
	for name, e := range eps {
		if _, err := NewVerifier(e); err != nil {
			t.Fatalf("%s: parsed endpoint does not build: %v", name, err)
		}
	}
	if eps, err := ParseConfig([]byte("server: {}\n")); err != nil || len(eps) != 0 {
		t.Fatalf("no webhooks block: %v, %v", eps, err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown provider", "webhooks:\n  a:\n    provider: stripey\n    secrets: [x]\n", `unknown provider "stripey"`},
		{"no provider", "webhooks:\n  a:\n    secrets: [x]\n", "unknown provider"},
		{"empty secrets", "webhooks:\n  a:\n    provider: stripe\n    secrets: []\n", "at least one secret"},
		{"empty secret", "webhooks:\n  a:\n    provider: stripe\n    secrets: [\"\"]\n", "secrets[0]: empty secret"},
		{"too many secrets", "webhooks:\n  a:\n    provider: stripe\n    secrets: [a,b,c,d,e,f,g,h,i]\n", "at most 8"},
		{"misspelt field", "webhooks:\n  a:\n    provider: stripe\n    secret: [x]\n", "secret"},
		{"bad tolerance", "webhooks:\n  a:\n    provider: stripe\n    secrets: [x]\n    tolerance: soon\n", `tolerance: "soon" is not a positive duration`},
		{"negative tolerance", "webhooks:\n  a:\n    provider: stripe\n    secrets: [x]\n    tolerance: -5m\n", "not a positive duration"},
		{"tolerance too long", "webhooks:\n  a:\n    provider: stripe\n    secrets: [x]\n    tolerance: 2h\n", "outside 1s..1h0m0s"},
		{"tolerance without timestamp", "webhooks:\n  a:\n    provider: github\n    secrets: [x]\n    tolerance: 5m\n", "signs no timestamp"},
		{"bad name", "webhooks:\n  \"a/b\":\n    provider: stripe\n    secrets: [x]\n", "only A-Z a-z 0-9"},
		{"name starts with dash", "webhooks:\n  -a:\n    provider: stripe\n    secrets: [x]\n", "starting with a letter or digit"},
		{"long name", "webhooks:\n  " + strings.Repeat("a", 65) + ":\n    provider: stripe\n    secrets: [x]\n", "longer than 64"},
		{"bad whsec", "webhooks:\n  a:\n    provider: standard\n    secrets: [\"whsec_not base64!\"]\n", "not a whsec_ base64 secret"},
		{"short whsec", "webhooks:\n  a:\n    provider: standard\n    secrets: [\"whsec_c2hvcnQ=\"]\n", "24 to 64"},
		{"square without url", "webhooks:\n  a:\n    provider: square\n    secrets: [x]\n", "url: square signs"},
		{"square relative url", "webhooks:\n  a:\n    provider: square\n    secrets: [x]\n    url: /hooks\n", "not an absolute"},
		{"url elsewhere", "webhooks:\n  a:\n    provider: stripe\n    secrets: [x]\n    url: https://x\n", "only the square profile"},
		{"hmac without block", "webhooks:\n  a:\n    provider: hmac\n    secrets: [x]\n", "needs its scheme"},
		{"hmac bad algorithm", "webhooks:\n  a:\n    provider: hmac\n    secrets: [x]\n    hmac: {header: X-S, algorithm: md5, id_field: id}\n", "not sha256, sha512 or sha1"},
		{"hmac no id", "webhooks:\n  a:\n    provider: hmac\n    secrets: [x]\n    hmac: {header: X-S}\n", "exactly one of id_header and id_field"},
		{"hmac both ids", "webhooks:\n  a:\n    provider: hmac\n    secrets: [x]\n    hmac: {header: X-S, id_header: X-Id, id_field: id}\n", "exactly one"},
		{"hmac template without body", "webhooks:\n  a:\n    provider: hmac\n    secrets: [x]\n    hmac: {header: X-S, id_header: X-Id, signed_payload: \"{id}\"}\n", "must end with {body}"},
		{"hmac timestamp not signed", "webhooks:\n  a:\n    provider: hmac\n    secrets: [x]\n    hmac: {header: X-S, id_header: X-Id, timestamp_header: X-T, signed_payload: \"{body}\"}\n", "{timestamp} once"},
		{"hmac bad header", "webhooks:\n  a:\n    provider: hmac\n    secrets: [x]\n    hmac: {header: \"X S\", id_header: X-Id, signed_payload: \"{id}.{body}\"}\n", "not a header name"},
		{"hmac id header not signed", "webhooks:\n  a:\n    provider: hmac\n    secrets: [x]\n    hmac: {header: X-S, id_header: X-Id}\n", "must hold {id} once exactly when id_header is set"},
		{"hmac id signed without header", "webhooks:\n  a:\n    provider: hmac\n    secrets: [x]\n    hmac: {header: X-S, id_field: id, signed_payload: \"{id}.{body}\"}\n", "must hold {id} once exactly when id_header is set"},
		{"hmac block elsewhere", "webhooks:\n  a:\n    provider: stripe\n    secrets: [x]\n    hmac: {header: X-S}\n", "only the hmac profile"},
		{"body limit", "webhooks:\n  a:\n    provider: stripe\n    secrets: [x]\n    max_body_bytes: 10\n", "max_body_bytes: 10 is outside"},
		{"tenant", "webhooks:\n  a:\n    provider: stripe\n    secrets: [x]\n    tenant: \"a b\"\n", "tenant: character 2"},
		{"not yaml", "webhooks: [unclosed\n", "not valid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
			var ce *ConfigError
			if !errors.Is(err, ErrConfig) || !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *ConfigError", err)
			}
		})
	}
}

func TestConfigErrorHidesSecrets(t *testing.T) {
	t.Parallel()
	// A YAML error must not echo the file's lines, which hold secrets.
	_, err := ParseConfig([]byte("webhooks:\n  a:\n    provider: stripe\n    secrets: [whsec_TOPSECRET]\n    tolerance: [1, 2]\n"))
	if err == nil || strings.Contains(err.Error(), "TOPSECRET") {
		t.Fatalf("error = %v", err)
	}
}

func TestNewVerifierDefaults(t *testing.T) {
	t.Parallel()
	for provider, want := range map[string]time.Duration{
		"stripe": 300 * time.Second, "standard": 5 * time.Minute, "slack": 5 * time.Minute, "paddle": 5 * time.Second,
	} {
		e := Endpoint{Name: "x", Provider: provider, Secrets: []string{standardOld}}.withDefaults()
		if e.Tolerance != want {
			t.Errorf("%s tolerance = %s, want %s", provider, e.Tolerance, want)
		}
	}
	if _, err := NewVerifier(Endpoint{Name: "x", Provider: "stripe"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no secrets: %v", err)
	}
}
