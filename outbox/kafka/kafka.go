// Package kafka publishes outbox messages to Kafka with franz-go: the
// ordering key is the record key (so a key's messages share a partition,
// in order), the topic is the message type's route (one topic by
// default), and the message id travels in the idem-id header. Kafka cannot
// drop a republish, so consumers deduplicate with package inbox.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
)

// Headers set on every record.
const (
	HeaderID        = "idem-id"
	HeaderType      = "idem-type"
	HeaderTenant    = "idem-tenant"
	HeaderCreatedAt = "idem-created-at"
)

// PrefixCloudEvents starts the CloudEvents attributes' headers (the Kafka
// binding's binary mode): ce_id, ce_type, …; datacontenttype is the
// content-type header.
const PrefixCloudEvents = "ce_"

// HeaderContentType carries the value's content type in the CloudEvents
// formats.
const HeaderContentType = "content-type"

// Config configures New; Brokers are required.
type Config struct {
	// Brokers are the seed brokers (host:port). Required; at most 100.
	Brokers []string
	// Topic receives every message Routes does not send elsewhere.
	// Default "idem".
	Topic string
	// Routes maps a message's type to its topic, e.g. a table of types or
	// the template "events.{type}". Default every type to Topic. The record
	// key stays the message's ordering key (the aggregate's id), so each
	// key's messages share a partition of their topic, in order.
	Routes outbox.Routes
	// CloudEvents chooses the wire format (default idem's headers) and the
	// source of CloudEvents.
	CloudEvents cloudevent.Config
	// Opts are extra franz-go options: kgo.DialTLSConfig for TLS, kgo.SASL
	// with a mechanism of franz-go's pkg/sasl/plain or pkg/sasl/scram, a
	// kfake cluster's dialer. (idem's kafka:// URLs set TLS and SASL from
	// their query; see package broker.)
	Opts []kgo.Opt
}

// Publisher produces to the topics of its routes.
type Publisher struct {
	cl     *kgo.Client
	topic  string
	routes outbox.Routes
	ce     cloudevent.Config
	sasl   *saslWatch
	// maxBytes is the client's ProducerBatchMaxBytes.
	maxBytes int
}

// New returns a producer. The client is idempotent (franz-go's default),
// so its own retries do not duplicate or reorder records of a partition.
func New(cfg Config) (*Publisher, error) {
	if len(cfg.Brokers) == 0 || len(cfg.Brokers) > 100 {
		return nil, fmt.Errorf("kafka: want 1..100 brokers, have %d", len(cfg.Brokers))
	}
	if cfg.Topic == "" {
		cfg.Topic = "idem"
	}
	if err := cfg.Routes.Validate(); err != nil {
		return nil, err
	}
	cfg.CloudEvents = cfg.CloudEvents.WithDefaults()
	if err := cfg.CloudEvents.Validate(); err != nil {
		return nil, err
	}
	sasl := &saslWatch{}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.WithHooks(sasl),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	}, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	maxBytes, _ := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32)
	if maxBytes <= 0 {
		maxBytes = 1000012 // franz-go's default, should its option read otherwise
	}
	return &Publisher{cl: cl, topic: cfg.Topic, routes: cfg.Routes, ce: cfg.CloudEvents, sasl: sasl, maxBytes: int(maxBytes)}, nil
}

// Ping asks the cluster for its metadata: it fails when no seed broker
// answers, the TLS handshake fails or SASL refuses the credentials. The
// producer itself only connects at the first Publish and retries there, so
// call Ping after New to find a wrong setting at start.
func (p *Publisher) Ping(ctx context.Context) error {
	p.sasl.cut.Store(false)
	if err := p.cl.Ping(ctx); err != nil {
		if p.sasl.cut.Load() {
			return fmt.Errorf("kafka: the broker closed the connection during SASL authentication "+
				"(wrong mechanism, user or password?): %w", err)
		}
		return fmt.Errorf("kafka: %w", err)
	}
	return nil
}

// saslWatch notes a SASL exchange the broker cut short. A broker may close
// the connection on a refused credential rather than answer
// SASL_AUTHENTICATION_FAILED (kfake does), and the client then reports
// only "EOF".
type saslWatch struct{ cut atomic.Bool }

func (w *saslWatch) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil && (key == kmsg.SASLHandshake.Int16() || key == kmsg.SASLAuthenticate.Int16()) {
		w.cut.Store(true)
	}
}

// MessagingSystem names Kafka in the relay's publish spans.
func (p *Publisher) MessagingSystem() string { return "kafka" }

// Topic is m's topic (Config.Routes); an unroutable type is an error
// wrapping outbox.ErrUnroutable.
func (p *Publisher) Topic(m outbox.Message) (string, error) {
	return p.routes.Destination(m, p.topic)
}

// Destination is the message's topic, for the relay's publish spans.
func (p *Publisher) Destination(m outbox.Message) string {
	if t, err := p.Topic(m); err == nil {
		return t
	}
	return p.topic
}

// Publish produces the records and waits for every ack.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	recs := make([]*kgo.Record, 0, len(msgs))
	at := make([]int, 0, len(msgs)) // recs[j] is msgs[at[j]]
	for i, m := range msgs {
		r, err := p.record(m)
		if err == nil {
			err = p.sendable(r)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		recs = append(recs, r)
		at = append(at, i)
	}
	if len(recs) == 0 {
		return errs
	}
	// ProduceSync gives the results in the order they complete (a record
	// failed at once comes first), not in the order of recs: each is
	// matched to its message by its record.
	index := make(map[*kgo.Record]int, len(recs))
	for j, r := range recs {
		index[r] = at[j]
	}
	for _, r := range p.cl.ProduceSync(ctx, recs...) {
		errs[index[r.Record]] = classify(r.Err)
	}
	return errs
}

// record is m as a Kafka record in the configured format. The idem-id
// header is always set: it is what consumers deduplicate by in the idem
// format, and costs nothing in the others.
func (p *Publisher) record(m outbox.Message) (*kgo.Record, error) {
	topic, err := p.Topic(m)
	if err != nil {
		return nil, err
	}
	r := &kgo.Record{Topic: topic, Key: []byte(m.Key), Value: m.Payload,
		Headers: []kgo.RecordHeader{{Key: HeaderID, Value: []byte(m.ID)}}}
	f := p.ce.Format
	if f.IdemHeaders() {
		r.Headers = append(r.Headers,
			kgo.RecordHeader{Key: HeaderType, Value: []byte(m.Type)},
			kgo.RecordHeader{Key: HeaderTenant, Value: []byte(m.Tenant)},
			kgo.RecordHeader{Key: HeaderCreatedAt, Value: []byte(m.CreatedAt.UTC().Format(time.RFC3339Nano))})
	}
	for k, v := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	source := cloudevent.Source(p.ce.Source, m.Tenant)
	switch {
	case f.BinaryMode():
		for _, a := range cloudevent.Attributes(m, source) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: PrefixCloudEvents + a.Name, Value: []byte(a.Value)})
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(cloudevent.ContentTypeData)})
	case f.StructuredMode():
		if r.Value, err = cloudevent.JSON(m, source); err != nil {
			return nil, err
		}
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(cloudevent.ContentTypeStructured)})
	}
	return r, nil
}

// recordOverhead bounds what a record batch and one record's framing add
// to its key, value and headers (a batch header of 61 bytes, varint
// lengths, offsets and timestamps).
const recordOverhead = 128

// sendable refuses, as outbox.ErrUndeliverable, a record larger than the
// producer's batch limit (kgo.ProducerBatchMaxBytes, 1000012 bytes by
// default, Kafka's own max.message.bytes default): no retry makes it fit.
// Checked before producing, it is a dead letter at once naming why, and
// the batch's other records go.
func (p *Publisher) sendable(r *kgo.Record) error {
	size := recordOverhead + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		size += 10 + len(h.Key) + len(h.Value)
	}
	if size > p.maxBytes {
		return outbox.Undeliverable(fmt.Errorf("kafka: record of about %d bytes is over the producer's batch limit of %d bytes (ProducerBatchMaxBytes)", size, p.maxBytes))
	}
	return nil
}

// classify marks faults of the cluster (unreachable, retriable broker
// errors, timeouts) as the broker's rather than the message's.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	if errors.As(err, &ne) || kerr.IsRetriable(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrRecordTimeout) || errors.Is(err, kgo.ErrClientClosed) {
		return outbox.BrokerUnavailable(err)
	}
	return err
}

func (p *Publisher) Close() error {
	p.cl.Close()
	return nil
}
