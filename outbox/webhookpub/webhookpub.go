// Package webhookpub delivers outbox messages as Standard Webhooks
// (standardwebhooks.com): a POST of {"type","timestamp","data"} with the
// headers webhook-id (the message id, the receiver's dedupe key),
// webhook-timestamp and webhook-signature (v1, HMAC-SHA256), and the
// message's W3C trace context (traceparent, tracestate) when it has one. A
// 2xx answer means delivered; a redirect is not followed (a failed
// delivery).
//
// With Config.CloudEvents the body is a CloudEvent instead, per the
// CloudEvents HTTP binding: the payload itself with ce-* headers (binary
// mode; the formats cloudevents and both, since an HTTP body is one thing)
// or the event as application/cloudevents+json (structured mode). The
// three webhook-* headers are sent and signed over the body in every
// format.
package webhookpub

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
	"github.com/idemhq/idem/webhook"
)

// SecretPrefix starts a Standard Webhooks secret; the rest is base64.
const SecretPrefix = "whsec_"

// Config configures New; URL and Secret are required.
type Config struct {
	// URL receives every message. Required.
	URL string
	// Secret is whsec_ followed by base64 of 24..64 random bytes. Required.
	Secret string
	// Timeout bounds one delivery. Default 10s; bound 100ms..1m.
	Timeout time.Duration
	// Concurrency bounds deliveries in flight. Default 32; bound 1..1024.
	Concurrency int
	// Client sends the requests. Default a client with Timeout. Redirects
	// are never followed, whatever the client's CheckRedirect: a 3xx is a
	// failed delivery.
	Client *http.Client
	// Clock returns the current time, sent as webhook-timestamp. Default
	// time.Now.
	Clock func() time.Time
	// CloudEvents chooses the body's format (default idem's envelope) and
	// the source of CloudEvents.
	CloudEvents cloudevent.Config
}

// Publisher posts to one URL.
type Publisher struct {
	cfg  Config
	key  []byte
	dest string // the URL's scheme and host, for spans and errors
}

// New checks cfg and returns a publisher.
func New(cfg Config) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, errors.New("webhookpub: URL is required")
	}
	key, err := DecodeSecret(cfg.Secret)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Timeout < 100*time.Millisecond || cfg.Timeout > time.Minute {
		return nil, fmt.Errorf("webhookpub: Timeout %s is outside 100ms..1m", cfg.Timeout)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 32
	}
	if cfg.Concurrency < 1 || cfg.Concurrency > 1024 {
		return nil, fmt.Errorf("webhookpub: Concurrency %d is outside 1..1024", cfg.Concurrency)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	// A redirect is not followed: the signed delivery would go to a URL
	// nobody configured (and a 301/302 turns the POST into a body-less
	// GET). A 3xx is a failed delivery, retried and then a dead letter.
	client := *cfg.Client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg.Client = &client
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	cfg.CloudEvents = cfg.CloudEvents.WithDefaults()
	if err := cfg.CloudEvents.Validate(); err != nil {
		return nil, err
	}
	// dest names the receiver in spans and errors, which are logged and
	// shown: a webhook URL often carries its token in its path, its query
	// or its credentials, so only the scheme and host are kept.
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("webhookpub: URL must be an absolute http or https URL")
	}
	return &Publisher{cfg: cfg, key: key, dest: u.Scheme + "://" + u.Host}, nil
}

// DecodeSecret returns the HMAC key of a whsec_ secret.
func DecodeSecret(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, errors.New("webhookpub: secret must start with " + SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(key) < 24 || len(key) > 64 {
		return nil, errors.New("webhookpub: secret must be whsec_ and base64 of 24..64 bytes")
	}
	return key, nil
}

// Sign returns the webhook-signature value for a delivery. It is
// webhook.SignStandard: the publisher signs with the very function whose
// bytes the intake's standard profile verifies.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	return webhook.SignStandard(key, id, timestamp, body)
}

type envelope struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// MessagingSystem names webhooks in the relay's publish spans.
func (p *Publisher) MessagingSystem() string { return "webhook" }

// Destination is the receiving URL's scheme and host (its path, query and
// credentials may hold its token), for the relay's publish spans; errors
// name the receiver the same way.
func (p *Publisher) Destination(outbox.Message) string { return p.dest }

// Publish delivers the messages concurrently (they have distinct ordering
// keys) and reports each one's outcome.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	sem := make(chan struct{}, p.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, m := range msgs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			// The relay gave up on the batch: what was not started is
			// not sent, and says why.
			for j := i; j < len(msgs); j++ {
				errs[j] = ctx.Err()
			}
			wg.Wait()
			return errs
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = p.deliver(ctx, m)
		}()
	}
	wg.Wait()
	return errs
}

// HeaderPrefixCloudEvents starts the CloudEvents attributes' headers in
// binary mode (the HTTP binding): ce-id, ce-type, …
const HeaderPrefixCloudEvents = "ce-"

// body is m's request body and content type in the configured format,
// with the ce-* headers of binary mode.
func (p *Publisher) body(m outbox.Message) (body []byte, contentType string, ce []cloudevent.Attr, err error) {
	f := p.cfg.CloudEvents.Format
	source := cloudevent.Source(p.cfg.CloudEvents.Source, m.Tenant)
	switch {
	case f.BinaryMode():
		return m.Payload, cloudevent.ContentTypeData, cloudevent.Attributes(m, source), nil
	case f.StructuredMode():
		body, err = cloudevent.JSON(m, source)
		return body, cloudevent.ContentTypeStructured, nil, err
	}
	body, err = json.Marshal(envelope{Type: m.Type, Timestamp: m.CreatedAt.UTC(), Data: m.Payload})
	return body, "application/json", nil, err
}

func (p *Publisher) deliver(ctx context.Context, m outbox.Message) error {
	body, contentType, ce, err := p.body(m)
	if err != nil {
		return err
	}
	ts := p.cfg.Clock().Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	for _, a := range ce {
		req.Header.Set(HeaderPrefixCloudEvents+a.Name, a.Value)
	}
	req.Header.Set("webhook-id", m.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(p.key, m.ID, ts, body))
	// The receiver continues the relay's trace from these (inbox.ContinueTrace
	// with r.Header.Get); they are not signed, like any header but the three
	// above.
	for _, h := range [...]string{outbox.HeaderTraceParent, outbox.HeaderTraceState} {
		if v := m.Headers[h]; v != "" {
			req.Header.Set(h, v)
		}
	}
	if err := sendable(req.Header); err != nil {
		return err
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil { // unreachable or timed out
		// The client's error quotes the whole URL.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return outbox.BrokerUnavailable(fmt.Errorf("webhookpub: POST %s: %w", p.dest, err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusBadGateway, resp.StatusCode == http.StatusServiceUnavailable,
		resp.StatusCode == http.StatusGatewayTimeout, resp.StatusCode == http.StatusTooManyRequests:
		return outbox.BrokerUnavailable(fmt.Errorf("webhookpub: %s answered %d", p.dest, resp.StatusCode))
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("webhookpub: %s answered %d, a redirect, which is not followed: configure the final URL", p.dest, resp.StatusCode)
	}
	return fmt.Errorf("webhookpub: %s answered %d", p.dest, resp.StatusCode)
}

// sendable refuses, as outbox.ErrUndeliverable, a header value HTTP
// cannot carry: a control character other than a tab (RFC 9110). An
// outbox key is any UTF-8 and travels as ce-subject in binary mode; the
// client would refuse the request, which reads as an unreachable
// receiver, and the relay would back off forever.
func sendable(h http.Header) error {
	for name, vs := range h {
		for _, v := range vs {
			if i := strings.IndexFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); i >= 0 {
				return outbox.Undeliverable(fmt.Errorf("webhookpub: header %s holds a control character (byte %d of its value)", name, i+1))
			}
		}
	}
	return nil
}

func (p *Publisher) Close() error { return nil }
