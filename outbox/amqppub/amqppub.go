// Package amqppub publishes outbox messages to RabbitMQ (AMQP 0-9-1) with
// amqp091-go: one channel in confirm mode, every message persistent and
// mandatory, its id as the AMQP message-id.
//
// What each of the broker's answers means to the relay:
//
//   - ack: the message is routed to its queues and, for durable queues,
//     written there (RabbitMQ confirms a persistent message once every
//     queue it went to has it on disk): published.
//   - nack: the broker could not take it (an internal error, a queue's
//     overflow set to reject-publish): an error, so the relay retries it
//     with backoff and counts the attempt.
//   - return (before its ack): the message reached the exchange but no
//     queue is bound for its routing key. A mandatory publish is how a
//     message bound for nowhere is noticed instead of dropped; it is
//     outbox.ErrUndeliverable, a dead letter at once, which Redrive sends
//     again once a queue is bound.
//   - a message AMQP cannot carry (a routing key or a header name over
//     255 bytes) is not sent: outbox.ErrUndeliverable, a dead letter at
//     once naming why, instead of a channel error the relay would take for
//     an outage.
//   - a closed connection or channel, a dial that fails, no answer in
//     time (a broker restarting, a resource alarm blocking publishers):
//     outbox.ErrBrokerUnavailable, so the relay backs off as a whole and
//     the backlog waits; the next Publish dials again.
//
// RabbitMQ cannot drop a republish by id: after a relay crash between
// publish and mark, consumers see the message twice with the same
// message-id and drop the copy with package inbox.
package amqppub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
)

// Headers set on every message in the idem format (AMQP headers table),
// besides the message-id, type and timestamp properties.
const (
	HeaderType      = "idem-type"
	HeaderTenant    = "idem-tenant"
	HeaderKey       = "idem-key"
	HeaderCreatedAt = "idem-created-at"
)

// PrefixCloudEvents starts the CloudEvents attributes in the headers
// table (application properties in the AMQP binding): cloudEvents:id, …
const PrefixCloudEvents = "cloudEvents:"

// DefaultRoute is the routing key of a message when Routes sets none:
// the tenant and the type, as NATS subjects are.
const DefaultRoute = "{tenant}.{type}"

// Config configures New; URL is required.
type Config struct {
	// URL is amqp://user:pass@host:port/vhost or amqps://…. Required.
	URL string
	// TLS configures amqps:// connections. Default: the system's roots,
	// the URL's host as server name.
	TLS *tls.Config
	// Exchange receives every message. Default "idem", declared (durable,
	// kind ExchangeKind) when missing.
	Exchange string
	// ExchangeKind is the kind of the exchange New declares: "topic"
	// (default), "direct", "fanout" or "headers".
	ExchangeKind string
	// NoDeclare makes New check that Exchange exists instead of declaring
	// it, for an exchange an operator owns.
	NoDeclare bool
	// Routes maps a message's type to its routing key. Default every type
	// to DefaultRoute.
	Routes outbox.Routes
	// CloudEvents chooses the wire format (default idem's headers) and the
	// source of CloudEvents.
	CloudEvents cloudevent.Config
	// DialTimeout bounds a connection's dial and handshake. Default 10s;
	// bound 100ms..1m.
	DialTimeout time.Duration
	// Heartbeat is the connection's heartbeat interval, how soon a dead
	// peer is noticed. Default 10s; bound 1s..10m.
	Heartbeat time.Duration
}

func (c Config) withDefaults() Config {
	if c.Exchange == "" {
		c.Exchange = "idem"
	}
	if c.ExchangeKind == "" {
		c.ExchangeKind = amqp.ExchangeTopic
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 10 * time.Second
	}
	c.CloudEvents = c.CloudEvents.WithDefaults()
	return c
}

func (c Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("amqppub: URL is required")
	case len(c.Exchange) > 255:
		return errors.New("amqppub: Exchange longer than 255 bytes")
	case c.ExchangeKind != amqp.ExchangeTopic && c.ExchangeKind != amqp.ExchangeDirect &&
		c.ExchangeKind != amqp.ExchangeFanout && c.ExchangeKind != amqp.ExchangeHeaders:
		return fmt.Errorf("amqppub: ExchangeKind %q: want topic, direct, fanout or headers", c.ExchangeKind)
	case c.DialTimeout < 100*time.Millisecond || c.DialTimeout > time.Minute:
		return fmt.Errorf("amqppub: DialTimeout %s is outside 100ms..1m", c.DialTimeout)
	case c.Heartbeat < time.Second || c.Heartbeat > 10*time.Minute:
		return fmt.Errorf("amqppub: Heartbeat %s is outside 1s..10m", c.Heartbeat)
	}
	if _, err := amqp.ParseURI(c.URL); err != nil {
		return fmt.Errorf("amqppub: URL: %w", err)
	}
	if err := c.Routes.Validate(); err != nil {
		return err
	}
	return c.CloudEvents.Validate()
}

// Publisher publishes to one exchange over one connection, dialled again
// after it is lost.
type Publisher struct {
	cfg Config
	// mu serializes Publish and Close: one confirm-mode channel carries
	// one batch at a time, so a return and an ack are matched to the
	// batch that caused them.
	mu      sync.Mutex
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  bool
}

// New checks cfg, connects, declares the exchange (or checks it, with
// NoDeclare) and returns a publisher: an unreachable broker, an untrusted
// certificate or refused credentials fail here.
func New(ctx context.Context, cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg}
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	var err error
	if cfg.NoDeclare {
		err = p.ch.ExchangeDeclarePassive(cfg.Exchange, cfg.ExchangeKind, true, false, false, false, nil)
	} else {
		err = p.ch.ExchangeDeclare(cfg.Exchange, cfg.ExchangeKind, true, false, false, false, nil)
	}
	if err != nil {
		p.drop()
		return nil, fmt.Errorf("amqppub: exchange %s: %w", cfg.Exchange, err)
	}
	return p, nil
}

// connect dials and opens a channel in confirm mode. Callers hold mu (or
// own p alone).
func (p *Publisher) connect(ctx context.Context) error {
	conn, err := amqp.DialConfig(p.cfg.URL, amqp.Config{
		TLSClientConfig: p.cfg.TLS,
		Heartbeat:       p.cfg.Heartbeat,
		Dial:            dialer(ctx, p.cfg.DialTimeout),
		Properties:      amqp.NewConnectionProperties(),
	})
	if err != nil {
		// Every failure to connect is an outage, a refused login too: the
		// backlog waits for the broker (or its credentials) to be fixed
		// rather than turning into dead letters. New reports it at start.
		return outbox.BrokerUnavailable(fmt.Errorf("amqppub: dial %s: %w", redact(p.cfg.URL), err))
	}
	conn.Config.Properties.SetClientConnectionName("idem relay")
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return outbox.BrokerUnavailable(fmt.Errorf("amqppub: channel: %w", err))
	}
	// Returns are read while a batch's confirms are awaited; the buffer
	// holds a batch's worth so the connection's reader never waits on us.
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 1024))
	p.conn, p.ch = conn, ch
	return nil
}

// dialer bounds the TCP dial and the handshake by timeout and ctx.
func dialer(ctx context.Context, timeout time.Duration) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// The handshake (TLS, AMQP's start/tune/open) must finish in time;
		// amqp091 clears the deadline once the connection is open.
		if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// drop closes the connection after a fault, so the next Publish dials.
func (p *Publisher) drop() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch, p.returns = nil, nil, nil
}

// MessagingSystem names RabbitMQ in the relay's publish spans.
func (p *Publisher) MessagingSystem() string { return "rabbitmq" }

// Destination is the exchange and the message's routing key, for the
// relay's publish spans.
func (p *Publisher) Destination(m outbox.Message) string {
	key, err := p.RoutingKey(m)
	if err != nil {
		return p.cfg.Exchange
	}
	return p.cfg.Exchange + " " + key
}

// RoutingKey is m's routing key (Config.Routes); an unroutable type is an
// error wrapping outbox.ErrUnroutable.
func (p *Publisher) RoutingKey(m outbox.Message) (string, error) {
	r := p.cfg.Routes
	if len(r.Table) == 0 && r.Template == "" {
		r.Template = DefaultRoute
	}
	return r.Destination(m, "")
}

// Publish sends the batch on the confirm-mode channel and waits for every
// confirm: pipelined, one round trip for the batch.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return outbox.Errs(len(msgs), outbox.BrokerUnavailable(errors.New("amqppub: publisher closed")))
	}
	if p.ch == nil || p.ch.IsClosed() {
		p.drop()
		if err := p.connect(ctx); err != nil {
			return outbox.Errs(len(msgs), err)
		}
	}
	// The batch's channel and connection: a fault below drops p's, and the
	// confirms already awaited still belong to these.
	conn, ch, returns := p.conn, p.ch, p.returns
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		key, err := p.RoutingKey(m)
		if err != nil {
			errs[i] = err
			continue
		}
		pub, err := p.message(m)
		if err != nil {
			errs[i] = err
			continue
		}
		if err := sendable(key, pub); err != nil {
			errs[i] = err
			continue
		}
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, key, true, false, pub)
		if err != nil {
			// The channel or connection is gone (or ctx ended): this and
			// the rest wait for the next batch on a new connection.
			p.drop()
			for j := i; j < len(msgs); j++ {
				if errs[j] == nil {
					errs[j] = outbox.BrokerUnavailable(fmt.Errorf("amqppub: publish: %w", err))
				}
			}
			confirms = confirms[:i]
			break
		}
	}
	returned := map[string]amqp.Return{}
	for i, c := range confirms {
		if c == nil {
			continue
		}
		errs[i] = await(ctx, conn, ch, returns, c, msgs[i].ID, returned)
		if errors.Is(errs[i], outbox.ErrBrokerUnavailable) {
			// The connection is lost or the broker does not answer: its
			// confirms will not come.
			p.drop()
			for j := i + 1; j < len(confirms); j++ {
				if confirms[j] != nil {
					errs[j] = errs[i]
				}
			}
			break
		}
	}
	return errs
}

// maxShortstr is AMQP 0-9-1's shortstr limit: a routing key, a header
// name, the type and message-id properties.
const maxShortstr = 255

// sendable refuses, as outbox.ErrUndeliverable, a message AMQP cannot
// carry: a routing key or a header name over 255 bytes ({tenant}.{type}
// can reach 384). Sent, it would fail the channel, which reads as an
// outage: the relay would back off forever with the message at the head
// of its key, and every other message would wait behind the reconnects.
func sendable(key string, pub amqp.Publishing) error {
	if len(key) > maxShortstr {
		return outbox.Undeliverable(fmt.Errorf("amqppub: routing key of %d bytes is over AMQP's %d (route it shorter with Routes)", len(key), maxShortstr))
	}
	for name := range pub.Headers {
		if len(name) > maxShortstr {
			return outbox.Undeliverable(fmt.Errorf("amqppub: header name of %d bytes (%.32q…) is over AMQP's %d", len(name), name, maxShortstr))
		}
	}
	if len(pub.Type) > maxShortstr || len(pub.MessageId) > maxShortstr {
		return outbox.Undeliverable(fmt.Errorf("amqppub: type or message-id over AMQP's %d bytes", maxShortstr))
	}
	return nil
}

// await waits for one message's confirm, collecting the returns that come
// before it (RabbitMQ sends a mandatory message's basic.return before its
// basic.ack, on the same channel, so a returned message's return is in
// hand when its ack arrives).
func await(ctx context.Context, conn *amqp.Connection, ch *amqp.Channel, returns <-chan amqp.Return,
	c *amqp.DeferredConfirmation, id string, returned map[string]amqp.Return) error {
	rets := returns
	take := func(r amqp.Return, ok bool) {
		if !ok { // the channel closed; its confirms are nacked
			rets = nil
			return
		}
		returned[r.MessageId] = r
	}
wait:
	for {
		select {
		case r, ok := <-rets:
			take(r, ok)
		case <-c.Done():
			break wait
		case <-ctx.Done():
			return outbox.BrokerUnavailable(fmt.Errorf("amqppub: no confirm: %w", ctx.Err()))
		}
	}
	// Take what the connection's reader handed over before the ack.
	for rets != nil {
		select {
		case r, ok := <-rets:
			take(r, ok)
		default:
			rets = nil
		}
	}
	if r, ok := returned[id]; ok {
		return outbox.Undeliverable(fmt.Errorf("amqppub: returned by exchange %q with routing key %q: %d %s (no queue bound)",
			r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText))
	}
	if !c.Acked() {
		if ch.IsClosed() || conn.IsClosed() {
			// amqp091 nacks the confirms outstanding when a channel closes.
			return outbox.BrokerUnavailable(errors.New("amqppub: the connection closed before the broker confirmed"))
		}
		return errors.New("amqppub: the broker refused the message (basic.nack)")
	}
	return nil
}

// message is m as an AMQP publishing in the configured format.
func (p *Publisher) message(m outbox.Message) (amqp.Publishing, error) {
	f := p.cfg.CloudEvents.Format
	pub := amqp.Publishing{
		MessageId:    m.ID,
		Type:         m.Type,
		Timestamp:    m.CreatedAt.UTC(),
		DeliveryMode: amqp.Persistent,
		ContentType:  cloudevent.ContentTypeData,
		Body:         m.Payload,
		Headers:      amqp.Table{},
	}
	for k, v := range m.Headers {
		pub.Headers[k] = v
	}
	if f.IdemHeaders() {
		pub.Headers[HeaderType] = m.Type
		pub.Headers[HeaderTenant] = m.Tenant
		pub.Headers[HeaderKey] = m.Key
		pub.Headers[HeaderCreatedAt] = m.CreatedAt.UTC().Format(time.RFC3339Nano)
	}
	source := cloudevent.Source(p.cfg.CloudEvents.Source, m.Tenant)
	switch {
	case f.BinaryMode():
		for _, a := range cloudevent.Attributes(m, source) {
			pub.Headers[PrefixCloudEvents+a.Name] = a.Value
		}
	case f.StructuredMode():
		body, err := cloudevent.JSON(m, source)
		if err != nil {
			return pub, err
		}
		pub.Body, pub.ContentType = body, cloudevent.ContentTypeStructured
	}
	return pub, nil
}

// redact is the URL without its credentials, for errors.
func redact(raw string) string {
	u, err := amqp.ParseURI(raw)
	if err != nil {
		return "amqp://…"
	}
	return fmt.Sprintf("%s://%s/%s", u.Scheme, net.JoinHostPort(u.Host, strconv.Itoa(u.Port)), u.Vhost)
}

// Close closes the connection; Publish then fails as an outage.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.drop()
	return nil
}
