package run

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Webhook deliveries are the fourth kind of operation: the load tool plays
// a Standard Webhooks sender (https://www.standardwebhooks.com) posting to
// POST /v1/webhooks/{endpoint}. A delivery has no Idempotency-Key and no
// API key; its key is the sender's stable event id, the webhook-id header,
// and every copy of it is a redelivery as a real sender makes one: the same
// id and body under a new timestamp and so a new signature. A service that
// deduplicated by a hash of the delivery would apply each copy.

// WebhookProvider is the provider profile the load tool signs for.
const WebhookProvider = "standard"

// Bounds of a Standard Webhooks secret, as the service's standard profile
// holds them: the base64 after whsec_ decodes to 24 to 64 bytes.
const (
	minWebhookKeyBytes = 24
	maxWebhookKeyBytes = 64
	// maxEndpointName is the service's bound on an endpoint's name.
	maxEndpointName = 64
	// redeliverySpread is how many distinct timestamps (one second apart,
	// going back from now) a delivery's copies cycle through. Copies sent
	// in the same second would otherwise carry the same timestamp and
	// signature; 120 s stays well inside the spec's 5 minute tolerance.
	redeliverySpread = 120
)

// webhookKey decodes a whsec_ secret into the HMAC key.
func webhookKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("load: webhook secret: not whsec_ followed by base64: %v", err)
	}
	if len(key) < minWebhookKeyBytes || len(key) > maxWebhookKeyBytes {
		return nil, fmt.Errorf("load: webhook secret decodes to %d bytes; want %d..%d", len(key), minWebhookKeyBytes, maxWebhookKeyBytes)
	}
	return key, nil
}

// checkEndpointName accepts what the service accepts as an endpoint name.
func checkEndpointName(name string) error {
	if name == "" || len(name) > maxEndpointName {
		return fmt.Errorf("load: webhook endpoint %q: want 1 to %d characters", name, maxEndpointName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-')) {
			return fmt.Errorf("load: webhook endpoint %q: only A-Z a-z 0-9 . _ - are allowed, starting with a letter or digit", name)
		}
	}
	return nil
}

// signStandard returns the Standard Webhooks headers of one delivery:
// webhook-id, webhook-timestamp (Unix seconds) and webhook-signature
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>".
//
// It deliberately does not call webhook.SignStandard, which the service's
// verifier and the outbox's publisher share: the load tool is an
// independent check of the service, and a signer written from the
// specification a second time catches a mistake that one shared function
// would make on both sides of the wire and so hide.
func signStandard(key []byte, id string, ts time.Time, body []byte) http.Header {
	tsText := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(tsText))
	m.Write([]byte{'.'})
	m.Write(body)
	h := http.Header{}
	h.Set("Webhook-Id", id)
	h.Set("Webhook-Timestamp", tsText)
	h.Set("Webhook-Signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	return h
}

// WebhookEventType is the event the service writes for a delivery of typ
// (the load tool's types need none of the service's sanitising).
func WebhookEventType(typ string) string { return "webhook." + WebhookProvider + "." + typ }
