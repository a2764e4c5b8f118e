package webhook

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemhq/idem"
)

// Provider names, as written in the configuration's provider field.
const (
	ProviderStripe   = "stripe"
	ProviderStandard = "standard"
	ProviderGitHub   = "github"
	ProviderShopify  = "shopify"
	ProviderSlack    = "slack"
	ProviderSquare   = "square"
	ProviderPaddle   = "paddle"
	ProviderHMAC     = "hmac"
)

// Providers lists the known provider names, in documentation order.
var Providers = []string{
	ProviderStripe, ProviderStandard, ProviderGitHub, ProviderShopify,
	ProviderSlack, ProviderSquare, ProviderPaddle, ProviderHMAC,
}

// Limits. A delivery or a configuration past one of them is refused with a
// clear error instead of costing unbounded work.
const (
	// MaxSecrets bounds the secrets of one endpoint: rotation needs two,
	// and every extra secret costs one HMAC per delivery.
	MaxSecrets = 8
	// MaxSecretBytes bounds one secret.
	MaxSecretBytes = 1024
	// MaxSignatures bounds the signatures read from one header; a header
	// with more is refused as invalid.
	MaxSignatures = 16
	// MaxHeaderBytes bounds a signature or timestamp header.
	MaxHeaderBytes = 8 << 10
	// MaxEndpoints bounds the endpoints of one configuration.
	MaxEndpoints = 1000
	// MaxEndpointNameLength bounds an endpoint's name (the {endpoint} in
	// /v1/webhooks/{endpoint}).
	MaxEndpointNameLength = 64

	defaultMaxBodyBytes = 4 << 20
	minMaxBodyBytes     = 1 << 10
	maxMaxBodyBytes     = 32 << 20
	minTolerance        = time.Second
	maxTolerance        = time.Hour
)

// Default tolerances of the profiles whose scheme signs a timestamp.
const (
	// DefaultStripeTolerance is stripe-go's DefaultTolerance.
	DefaultStripeTolerance = 300 * time.Second
	// DefaultStandardTolerance is the Standard Webhooks specification's.
	DefaultStandardTolerance = 5 * time.Minute
	// DefaultSlackTolerance is the five minutes Slack's documentation asks for.
	DefaultSlackTolerance = 5 * time.Minute
	// DefaultPaddleTolerance is the tolerance Paddle's own SDKs use ("Our
	// SDKs have a default tolerance of five seconds", Paddle's signature
	// verification guide). Raise it per endpoint if clocks drift.
	DefaultPaddleTolerance = 5 * time.Second
	// DefaultHMACTolerance applies to the hmac profile when it has a
	// timestamp header.
	DefaultHMACTolerance = 5 * time.Minute
)

// Endpoint is one configured webhook receiver: /v1/webhooks/{Name}.
type Endpoint struct {
	// Name is the {endpoint} path segment and part of the dedupe
	// operation. Required; 1 to 64 characters of A-Z a-z 0-9 . _ -,
	// starting with a letter or digit.
	Name string
	// Provider selects the profile: one of Providers. Required.
	Provider string
	// Secrets verify signatures; a delivery signed with any of them is
	// accepted, so a secret is rotated by adding the new one, waiting for
	// the sender to switch, and removing the old one. Required; 1 to 8
	// secrets of 1 to 1024 bytes. For the standard profile each is the
	// base64 secret, with or without its whsec_ prefix, decoding to 24 to
	// 64 bytes; for every other profile the secret's bytes are the key as
	// the provider shows it (Stripe's key includes its whsec_ prefix).
	Secrets []string
	// Tenant is the scope the deliveries' dedupe keys live in. Default
	// idem.DefaultTenant; 1 to 255 visible ASCII characters.
	Tenant string
	// Tolerance bounds how far a signed timestamp may be from now, either
	// way. Default per profile (stripe 300s, standard 5m, slack 5m, paddle
	// 5s, hmac 5m); bound 1s..1h. Must be unset for profiles whose scheme
	// signs no timestamp (github, shopify, square, hmac without a timestamp
	// header): a tolerance there would promise a replay check that cannot
	// happen.
	Tolerance time.Duration
	// URL is the notification URL exactly as configured at the provider;
	// Square signs it together with the body. Required for square (an
	// absolute http or https URL), unset otherwise.
	URL string
	// MaxBodyBytes bounds the body Verify accepts. Default 4 MiB; bound
	// 1 KiB..32 MiB.
	MaxBodyBytes int
	// HMAC describes the scheme of the hmac profile. Required for hmac,
	// unset otherwise.
	HMAC *HMACConfig
}

// HMACConfig describes a generic HMAC signature scheme, for senders without
// a profile of their own.
type HMACConfig struct {
	// Header carries the signature. Required.
	Header string
	// Algorithm is sha256, sha512 or sha1. Default sha256.
	Algorithm string
	// Encoding of the signature: hex or base64. Default hex.
	Encoding string
	// Prefix, when set, must start each signature and is stripped before
	// decoding (e.g. "sha256="). Default none.
	Prefix string
	// Separator, when set, splits the header into several signatures (e.g.
	// "," or " "), any of which may match. Default none: one signature.
	Separator string
	// TimestampHeader, when set, carries the signed time as Unix seconds;
	// the tolerance is then enforced. Default none.
	TimestampHeader string
	// SignedPayload is the template of the signed bytes: {body} is the raw
	// body, {timestamp} the timestamp header's value, {id} the id header's
	// value. Default "{body}", or "{timestamp}.{body}" with a
	// TimestampHeader. {body} must appear exactly once, at the end;
	// {timestamp} exactly when TimestampHeader is set; {id} exactly when
	// IDHeader is set (an id the signature does not cover could be changed
	// to replay a signed delivery as a new event). Up to 256 bytes.
	SignedPayload string
	// IDHeader or IDField (exactly one) locate the stable event id: a
	// header name, whose value SignedPayload must include as {id}, or a
	// dot-separated path into the JSON body ("id", "data.event_id").
	IDHeader string
	IDField  string
	// TypeHeader or TypeField (at most one) locate the event type. Default
	// none: events have an empty type. A type header is not signed: its
	// events are marked Event.TypeUnsigned; prefer TypeField.
	TypeHeader string
	TypeField  string
}

func (e Endpoint) withDefaults() Endpoint {
	if e.Tenant == "" {
		e.Tenant = idem.DefaultTenant
	}
	if e.MaxBodyBytes == 0 {
		e.MaxBodyBytes = defaultMaxBodyBytes
	}
	if e.Tolerance == 0 {
		switch e.Provider {
		case ProviderStripe:
			e.Tolerance = DefaultStripeTolerance
		case ProviderStandard:
			e.Tolerance = DefaultStandardTolerance
		case ProviderSlack:
			e.Tolerance = DefaultSlackTolerance
		case ProviderPaddle:
			e.Tolerance = DefaultPaddleTolerance
		case ProviderHMAC:
			if e.HMAC != nil && e.HMAC.TimestampHeader != "" {
				e.Tolerance = DefaultHMACTolerance
			}
		}
	}
	if e.HMAC != nil {
		h := *e.HMAC
		if h.Algorithm == "" {
			h.Algorithm = "sha256"
		}
		if h.Encoding == "" {
			h.Encoding = "hex"
		}
		if h.SignedPayload == "" {
			h.SignedPayload = "{body}"
			if h.TimestampHeader != "" {
				h.SignedPayload = "{timestamp}.{body}"
			}
		}
		e.HMAC = &h
	}
	return e
}

func (e Endpoint) signsTimestamp() bool {
	switch e.Provider {
	case ProviderStripe, ProviderStandard, ProviderSlack, ProviderPaddle:
		return true
	case ProviderHMAC:
		return e.HMAC != nil && e.HMAC.TimestampHeader != ""
	}
	return false
}

// validate checks an endpoint after withDefaults. tolSet tells whether the
// user set Tolerance (before defaults), for the profiles that sign no
// timestamp.
func (e Endpoint) validate(tolSet bool) error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Endpoint: e.Name, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if err := checkEndpointName(e.Name); err != nil {
		return bad("name", "%s", err)
	}
	known := false
	for _, p := range Providers {
		known = known || p == e.Provider
	}
	if !known {
		return bad("provider", "unknown provider %q (known: %s)", e.Provider, strings.Join(Providers, ", "))
	}
	if len(e.Secrets) == 0 {
		return bad("secrets", "at least one secret is required")
	}
	if len(e.Secrets) > MaxSecrets {
		return bad("secrets", "%d secrets, at most %d", len(e.Secrets), MaxSecrets)
	}
	for i, s := range e.Secrets {
		field := fmt.Sprintf("secrets[%d]", i)
		if s == "" {
			return bad(field, "empty secret")
		}
		if len(s) > MaxSecretBytes {
			return bad(field, "longer than %d bytes", MaxSecretBytes)
		}
		if e.Provider == ProviderStandard {
			if _, err := standardKey(s); err != nil {
				return bad(field, "%s", err)
			}
		}
	}
	if len(e.Tenant) > 255 {
		return bad("tenant", "longer than 255 characters")
	}
	for i := 0; i < len(e.Tenant); i++ {
		if c := e.Tenant[i]; c < 0x21 || c > 0x7e {
			return bad("tenant", "character %d is not visible ASCII", i+1)
		}
	}
	if e.signsTimestamp() {
		if e.Tolerance < minTolerance || e.Tolerance > maxTolerance {
			return bad("tolerance", "%s is outside %s..%s", e.Tolerance, minTolerance, maxTolerance)
		}
	} else if tolSet {
		return bad("tolerance", "provider %s signs no timestamp, so a tolerance cannot be enforced; remove it", e.Provider)
	}
	if e.MaxBodyBytes < minMaxBodyBytes || e.MaxBodyBytes > maxMaxBodyBytes {
		return bad("max_body_bytes", "%d is outside %d..%d", e.MaxBodyBytes, minMaxBodyBytes, maxMaxBodyBytes)
	}
	if e.Provider == ProviderSquare {
		u, err := url.Parse(e.URL)
		if e.URL == "" {
			return bad("url", "square signs the notification URL with the body: set it exactly as configured at Square")
		}
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return bad("url", "%q is not an absolute http(s) URL", e.URL)
		}
	} else if e.URL != "" {
		return bad("url", "only the square profile signs a URL")
	}
	if e.Provider == ProviderHMAC {
		if e.HMAC == nil {
			return bad("hmac", "the hmac profile needs its scheme (header, algorithm, encoding, id location)")
		}
		return e.HMAC.validate(bad)
	} else if e.HMAC != nil {
		return bad("hmac", "only the hmac profile takes an hmac block")
	}
	return nil
}

func (h *HMACConfig) validate(bad func(field, format string, args ...any) error) error {
	if !validHeaderName(h.Header) {
		return bad("hmac.header", "%q is not a header name", h.Header)
	}
	switch h.Algorithm {
	case "sha256", "sha512", "sha1":
	default:
		return bad("hmac.algorithm", "%q is not sha256, sha512 or sha1", h.Algorithm)
	}
	switch h.Encoding {
	case "hex", "base64":
	default:
		return bad("hmac.encoding", "%q is not hex or base64", h.Encoding)
	}
	if len(h.Prefix) > 32 || len(h.Separator) > 4 {
		return bad("hmac.prefix", "prefix up to 32 bytes, separator up to 4")
	}
	if h.TimestampHeader != "" && !validHeaderName(h.TimestampHeader) {
		return bad("hmac.timestamp_header", "%q is not a header name", h.TimestampHeader)
	}
	if (h.IDHeader == "") == (h.IDField == "") {
		return bad("hmac.id_header", "set exactly one of id_header and id_field")
	}
	t := h.SignedPayload
	switch {
	case len(t) > 256:
		return bad("hmac.signed_payload", "longer than 256 bytes")
	case strings.Count(t, "{body}") != 1 || !strings.HasSuffix(t, "{body}"):
		return bad("hmac.signed_payload", "%q must end with {body}, once", t)
	case (strings.Count(t, "{timestamp}") == 1) != (h.TimestampHeader != ""),
		strings.Count(t, "{timestamp}") > 1:
		return bad("hmac.signed_payload", "%q must hold {timestamp} once exactly when timestamp_header is set", t)
	case (strings.Count(t, "{id}") == 1) != (h.IDHeader != ""),
		strings.Count(t, "{id}") > 1:
		return bad("hmac.signed_payload", "%q must hold {id} once exactly when id_header is set: an id the signature does not cover lets a signed delivery be replayed under a new id", t)
	}
	if h.IDHeader != "" && !validHeaderName(h.IDHeader) {
		return bad("hmac.id_header", "%q is not a header name", h.IDHeader)
	}
	if h.IDField != "" && !validPath(h.IDField) {
		return bad("hmac.id_field", "%q is not a dot-separated field path", h.IDField)
	}
	if h.TypeHeader != "" && h.TypeField != "" {
		return bad("hmac.type_header", "set at most one of type_header and type_field")
	}
	if h.TypeHeader != "" && !validHeaderName(h.TypeHeader) {
		return bad("hmac.type_header", "%q is not a header name", h.TypeHeader)
	}
	if h.TypeField != "" && !validPath(h.TypeField) {
		return bad("hmac.type_field", "%q is not a dot-separated field path", h.TypeField)
	}
	return nil
}

func checkEndpointName(name string) error {
	if name == "" {
		return fmt.Errorf("empty")
	}
	if len(name) > MaxEndpointNameLength {
		return fmt.Errorf("%q is longer than %d characters", name, MaxEndpointNameLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-')) {
			return fmt.Errorf("%q: only A-Z a-z 0-9 . _ - are allowed, starting with a letter or digit", name)
		}
	}
	return nil
}

// validHeaderName accepts an RFC 9110 token of up to 128 bytes.
func validHeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validPath accepts up to 8 dot-separated non-empty names, 128 bytes in all.
func validPath(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	parts := strings.Split(s, ".")
	if len(parts) > 8 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
	}
	return true
}

// standardKey decodes a Standard Webhooks secret: base64 (standard
// alphabet, padded), optionally prefixed whsec_, of 24 to 64 bytes as the
// specification says.
func standardKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("not a whsec_ base64 secret: %v", err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("decodes to %d bytes; the Standard Webhooks specification asks for 24 to 64", len(key))
	}
	return key, nil
}
