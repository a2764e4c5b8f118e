// Package kafka publishes outbox messages to Kafka with franz-go: the
// ordering key is the record key (so a key's messages share a partition,
// in order), and the message id travels in the idem-id header. Kafka cannot
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
)

// Headers set on every record.
const (
	HeaderID        = "idem-id"
	HeaderType      = "idem-type"
	HeaderTenant    = "idem-tenant"
	HeaderCreatedAt = "idem-created-at"
)

// Config configures New; Brokers are required.
type Config struct {
	// Brokers are the seed brokers (host:port). Required; at most 100.
	Brokers []string
	// Topic receives every message. Default "idem".
	Topic string
	// Opts are extra franz-go options: kgo.DialTLSConfig for TLS, kgo.SASL
	// with a mechanism of franz-go's pkg/sasl/plain or pkg/sasl/scram, a
	// kfake cluster's dialer. (idem's kafka:// URLs set TLS and SASL from
	// their query; see package broker.)
	Opts []kgo.Opt
}

// Publisher produces to one topic.
type Publisher struct {
	cl    *kgo.Client
	topic string
	sasl  *saslWatch
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
	return &Publisher{cl: cl, topic: cfg.Topic, sasl: sasl}, nil
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

// Destination is the topic, for the relay's publish spans.
func (p *Publisher) Destination(outbox.Message) string { return p.topic }

// Publish produces the records and waits for every ack.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		r := &kgo.Record{Topic: p.topic, Key: []byte(m.Key), Value: m.Payload, Headers: []kgo.RecordHeader{
			{Key: HeaderID, Value: []byte(m.ID)},
			{Key: HeaderType, Value: []byte(m.Type)},
			{Key: HeaderTenant, Value: []byte(m.Tenant)},
			{Key: HeaderCreatedAt, Value: []byte(m.CreatedAt.UTC().Format(time.RFC3339Nano))},
		}}
		for k, v := range m.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		recs[i] = r
	}
	res := p.cl.ProduceSync(ctx, recs...)
	errs := make([]error, len(msgs))
	for i, r := range res {
		errs[i] = classify(r.Err)
	}
	return errs
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
