// Package natspub publishes outbox messages to NATS JetStream: stream IDEM,
// subjects idem.<tenant>.<type>, the message id as Nats-Msg-Id so that
// JetStream drops a republish inside its duplicate window.
package natspub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
)

// Headers set on every message besides Nats-Msg-Id.
const (
	HeaderType      = "Idem-Type"
	HeaderTenant    = "Idem-Tenant"
	HeaderKey       = "Idem-Ordering-Key"
	HeaderCreatedAt = "Idem-Created-At"
)

// PrefixCloudEvents starts the CloudEvents attributes' headers (the NATS
// binding's binary mode): ce-id, ce-type, …; datacontenttype is the
// content-type header.
const PrefixCloudEvents = "ce-"

// HeaderContentType carries the body's content type in the CloudEvents
// formats.
const HeaderContentType = "content-type"

// DefaultRoute is the subject of a message under SubjectPrefix when Routes
// sets none.
const DefaultRoute = "{tenant}.{type}"

// Config configures New. The zero value is usable.
type Config struct {
	// Stream is the JetStream stream, created when missing. Default "IDEM".
	Stream string
	// SubjectPrefix starts every subject: <prefix>.<tenant>.<type>.
	// Default "idem".
	SubjectPrefix string
	// Duplicates is the stream's deduplication window: a republish of an id
	// inside it is dropped. Default 10m; bound 1s..24h. JetStream keeps
	// every id of the window in memory (see docs/outbox.md).
	Duplicates time.Duration
	// Storage is the stream's storage: jetstream.FileStorage (default) or
	// MemoryStorage.
	Storage jetstream.StorageType
	// MaxPending bounds the asynchronous publishes awaiting an ack.
	// Default 4096; bound 1..65536.
	MaxPending int
	// Replicas is how many servers of a NATS cluster keep the stream. With
	// 3 the stream keeps accepting (and deduplicating) messages while one
	// server is down. Default: an existing stream keeps its own count (one
	// an operator created with 3 is not scaled down), a new one gets 1;
	// bound 1..5 (JetStream's own limit).
	Replicas int
	// Routes maps a message's type to its subject under SubjectPrefix
	// (<prefix>.<route>, so the stream holds it). Default every type to
	// DefaultRoute.
	Routes outbox.Routes
	// CloudEvents chooses the wire format (default idem's headers) and the
	// source of CloudEvents.
	CloudEvents cloudevent.Config
	// CloseConn makes Close close the connection too: set it when the
	// publisher owns the connection it was given. Default false: the
	// caller closes it.
	CloseConn bool
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = "IDEM"
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = "idem"
	}
	if c.Duplicates == 0 {
		c.Duplicates = 10 * time.Minute
	}
	if c.MaxPending == 0 {
		c.MaxPending = 4096
	}
	if len(c.Routes.Table) == 0 && c.Routes.Template == "" {
		c.Routes.Template = DefaultRoute
	}
	c.CloudEvents = c.CloudEvents.WithDefaults()
	return c
}

func (c Config) validate() error {
	if c.Duplicates < time.Second || c.Duplicates > 24*time.Hour {
		return fmt.Errorf("natspub: Duplicates %s is outside 1s..24h", c.Duplicates)
	}
	if c.MaxPending < 1 || c.MaxPending > 65536 {
		return fmt.Errorf("natspub: MaxPending %d is outside 1..65536", c.MaxPending)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("natspub: Replicas %d is outside 1..5", c.Replicas)
	}
	if err := c.Routes.Validate(); err != nil {
		return err
	}
	return c.CloudEvents.Validate()
}

// Publisher publishes to one stream over one connection.
type Publisher struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config
}

// New ensures the stream exists (creating it, or setting its duplicate
// window, and its replicas when cfg names them, to cfg's) and returns a
// publisher on nc.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxPending))
	if err != nil {
		return nil, fmt.Errorf("natspub: %w", err)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
		st, err := js.Stream(ctx, cfg.Stream)
		switch {
		case err == nil:
			cfg.Replicas = st.CachedInfo().Config.Replicas
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, fmt.Errorf("natspub: stream %s: %w", cfg.Stream, err)
		}
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       cfg.Stream,
		Subjects:   []string{cfg.SubjectPrefix + ".>"},
		Duplicates: cfg.Duplicates,
		Storage:    cfg.Storage,
		Replicas:   cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natspub: stream %s: %w", cfg.Stream, err)
	}
	return &Publisher{nc: nc, js: js, cfg: cfg}, nil
}

// Subject is the subject a message is published on: its route under
// SubjectPrefix. An unroutable type is an error wrapping
// outbox.ErrUnroutable.
func (p *Publisher) Subject(m outbox.Message) (string, error) {
	route, err := p.cfg.Routes.Destination(m, "")
	if err != nil {
		return "", err
	}
	return p.cfg.SubjectPrefix + "." + route, nil
}

// MessagingSystem names NATS in the relay's publish spans.
func (p *Publisher) MessagingSystem() string { return "nats" }

// Destination is the message's subject, for the relay's publish spans.
func (p *Publisher) Destination(m outbox.Message) string {
	subject, err := p.Subject(m)
	if err != nil {
		return p.cfg.SubjectPrefix
	}
	return subject
}

// Publish sends the messages asynchronously (pipelined on the connection)
// and waits for every ack.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		nm, err := p.message(m)
		if err != nil {
			errs[i] = err
			continue
		}
		if err := sendable(nm.Header); err != nil {
			errs[i] = err
			continue
		}
		f, err := p.js.PublishMsgAsync(nm, jetstream.WithMsgID(m.ID))
		if err != nil {
			errs[i] = classify(err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classify(err)
		case <-ctx.Done():
			errs[i] = outbox.BrokerUnavailable(ctx.Err())
		}
	}
	return errs
}

// message is m as a NATS message in the configured format.
func (p *Publisher) message(m outbox.Message) (*nats.Msg, error) {
	subject, err := p.Subject(m)
	if err != nil {
		return nil, err
	}
	nm := nats.NewMsg(subject)
	nm.Data = m.Payload
	for k, v := range m.Headers {
		nm.Header.Set(k, v)
	}
	f := p.cfg.CloudEvents.Format
	if f.IdemHeaders() {
		nm.Header.Set(HeaderType, m.Type)
		nm.Header.Set(HeaderTenant, m.Tenant)
		nm.Header.Set(HeaderKey, m.Key)
		nm.Header.Set(HeaderCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	source := cloudevent.Source(p.cfg.CloudEvents.Source, m.Tenant)
	switch {
	case f.BinaryMode():
		// Set, not Add: nats.Header canonicalizes names, and the binding's
		// lower-case ce- names must reach the wire as they are.
		for _, a := range cloudevent.Attributes(m, source) {
			nm.Header[PrefixCloudEvents+a.Name] = []string{a.Value}
		}
		nm.Header[HeaderContentType] = []string{cloudevent.ContentTypeData}
	case f.StructuredMode():
		if nm.Data, err = cloudevent.JSON(m, source); err != nil {
			return nil, err
		}
		nm.Header[HeaderContentType] = []string{cloudevent.ContentTypeStructured}
	}
	return nm, nil
}

// sendable refuses, as outbox.ErrUndeliverable, headers NATS cannot
// carry: its header block is text lines, "Name: value" ended by CRLF, so a
// name must be a token (no ':', space or control character) and a value
// must hold no CR, LF or other control character. An outbox key or header
// is any UTF-8 (the ordering key travels as Idem-Ordering-Key and
// ce-subject): sent, a line break in it would end the header early or add
// one of its own, and the server would refuse the message or read a
// header the relay did not set.
func sendable(h nats.Header) error {
	for name, vs := range h {
		if name == "" || strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r == ':' || r >= 0x7f }) >= 0 {
			return outbox.Undeliverable(fmt.Errorf("natspub: header name %.32q is not a token", name))
		}
		for _, v := range vs {
			if i := strings.IndexFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); i >= 0 {
				return outbox.Undeliverable(fmt.Errorf("natspub: header %s holds a control character (byte %d of its value)", name, i+1))
			}
		}
	}
	return nil
}

// classify marks connection-level faults as the broker's: the message
// itself was not refused. In a cluster that includes the stream answering
// 503 (no quorum, JetStream temporarily unavailable) or being offline
// while a server is down or its leader moves: the relay backs off and
// republishes, and the stream's duplicate window drops what had landed.
// It also includes a republish that finds the first publish of its id
// still in process (see duplicateInProcess), and the socket's own error
// (a broken pipe as a node goes down), which the client returns as it is
// when a publish fills its buffer and flushes inline.
func classify(err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.Code == 503 || offline[api.ErrorCode] || api.ErrorCode == duplicateInProcess) {
		return outbox.BrokerUnavailable(err)
	}
	var netErr net.Error
	switch {
	case errors.As(err, &netErr):
		return outbox.BrokerUnavailable(err)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return outbox.BrokerUnavailable(err)
	}
	return err
}

// offline holds the JetStream error codes of a stream or its cluster being
// offline (answered with status 500, not 503).
var offline = map[jetstream.ErrorCode]bool{
	10118: true, // stream is offline
	10194: true, // stream is offline: {err}
}

// duplicateInProcess is a clustered stream's answer (409, "duplicate
// message id is in process") to a message whose id an earlier publish,
// proposed but not yet stored, already carries: the republish after a
// publish whose ack did not come in time, the relay's retry. Asked again,
// the stream acknowledges it as a duplicate once the first is stored, or
// stores it if the first never was. It is the stream's state, not the
// message's: counted as a refusal it would make a dead letter of a
// message the stream holds.
const duplicateInProcess jetstream.ErrorCode = 10158

// Close waits briefly for outstanding acks and closes the connection when
// the publisher owns it.
func (p *Publisher) Close() error {
	select {
	case <-p.js.PublishAsyncComplete():
	case <-time.After(5 * time.Second):
	}
	if p.cfg.CloseConn {
		p.nc.Close()
	}
	return nil
}
