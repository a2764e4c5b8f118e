// Package webhook verifies deliveries from payment and SaaS providers and
// names each one by the id its sender promises is stable.
//
// A provider that did not hear our 200 sends the same event again: same
// event id, new delivery timestamp, new signature. If the deduplication key
// held anything that changes per delivery, the second copy would look new
// and its side effects would happen twice. So every profile here extracts
// the sender's stable event id (Stripe's evt_ id, the Standard Webhooks
// webhook-id, ...) and never hashes the delivery. Where the sender signs
// only the body and names the event in headers it does not sign (GitHub,
// Shopify), the key is the hash of the signed body instead: a header
// anyone can change must not make a resent body a new event.
//
// Each profile checks the signature over the raw request bytes before
// anything is parsed, compares in constant time (hmac.Equal), accepts any of
// several configured secrets (rotation) and any of several signatures in one
// header, and, where the scheme signs a timestamp, refuses one outside the
// tolerance in either direction. It checks nothing else: an unknown field or
// another API version in the body never refuses a delivery.
//
// Intake is the whole intake as an http.Handler, the one `idem serve`
// runs at /v1/webhooks/{endpoint}: verify, then deduplicate with the
// keeper under DedupeRequest, then write the webhook.<provider>.<type>
// outbox event and run the Handler registered for the event type inside
// the same transaction, and answer the provider.
package webhook
