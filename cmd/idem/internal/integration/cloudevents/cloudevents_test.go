// Package cloudevents_test checks that what idem's publishers send in the
// CloudEvents formats is what the CloudEvents SDK for Go reads: for each
// protocol and format, every event parses and validates, with the id,
// type, source, time, subject, data and trace context of the outbox row.
// HTTP goes through the SDK's own receiver; NATS, Kafka and AMQP through
// the SDK's binding.ToEvent over a message reader built as the SDK's
// protocol modules build theirs (a prefix for the attribute headers, a
// content-type header for datacontenttype), since those modules do not
// resolve here.
package cloudevents_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/idemhq/idem/cmd/idem/internal/embeddednats"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testrabbit"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/amqppub"
	"github.com/idemhq/idem/outbox/cloudevent"
	"github.com/idemhq/idem/outbox/kafka"
	"github.com/idemhq/idem/outbox/natspub"
	"github.com/idemhq/idem/outbox/webhookpub"
)

var node *testrabbit.Node

func TestMain(m *testing.M) {
	var err error
	if node, err = testrabbit.StartMain(); err != nil {
		fmt.Fprintln(os.Stderr, "testrabbit:", err)
		os.Exit(1)
	}
	code := m.Run()
	node.Stop()
	code = leakcheck.After(code, goleak.IgnoreAnyFunction("github.com/cloudevents/sdk-go/v2/protocol/http.(*Protocol).OpenInbound"))
	os.Exit(code)
}

// wire is one message as a protocol delivered it: its headers (the
// protocol's names, as sent) and body.
type wire struct {
	headers map[string]string
	body    []byte
}

// protocol publishes with a format and returns the deliveries as read
// from the broker, and how the SDK reads one.
type protocol struct {
	name string
	// prefix and contentType are the binding's attribute prefix and the
	// header of datacontenttype.
	prefix, contentType string
	run                 func(t *testing.T, f cloudevent.Format, source string, msgs []outbox.Message) []wire
}

var protocols = []protocol{
	{"nats", natspub.PrefixCloudEvents, natspub.HeaderContentType, runNATS},
	{"kafka", kafka.PrefixCloudEvents, kafka.HeaderContentType, runKafka},
	{"amqp", amqppub.PrefixCloudEvents, "content-type", runAMQP},
}

// rows are outbox messages as the relay hands them to a publisher: ids,
// creation times and the trace context of their publish spans.
func rows() []outbox.Message {
	created := time.Date(2026, 12, 1, 10, 30, 0, 123456789, time.UTC)
	var ms []outbox.Message
	for i, typ := range []string{"order.created", "order.paid", "invoice.sent"} {
		m := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: typ, Key: fmt.Sprintf("order-%d", i),
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), CreatedAt: created.Add(time.Duration(i) * time.Second),
			Headers: map[string]string{
				outbox.HeaderTraceParent: fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e47%02d-00f067aa0ba902b7-01", i),
				outbox.HeaderTraceState:  "idem=1",
			}}
		if i == 2 {
			m.Key = "" // no subject
			delete(m.Headers, outbox.HeaderTraceState)
		}
		ms = append(ms, m)
	}
	return ms
}

var formats = []cloudevent.Format{cloudevent.Binary, cloudevent.Structured, cloudevent.Both}

func TestSDKReadsEveryEvent(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		for _, f := range formats {
			t.Run(p.name+"/"+string(f), func(t *testing.T) {
				t.Parallel()
				const source = "/orders/{tenant}"
				msgs := rows()
				got := p.run(t, f, source, msgs)
				if len(got) != len(msgs) {
					t.Fatalf("%d messages delivered, want %d", len(got), len(msgs))
				}
				events := map[string]event.Event{}
				for _, w := range got {
					e, err := binding.ToEvent(context.Background(), newHeaderMessage(w, p.prefix, p.contentType))
					if err != nil {
						t.Fatalf("the SDK cannot read %v: %v", w.headers, err)
					}
					events[e.ID()] = *e
				}
				check(t, msgs, events, "/orders/acme")
			})
		}
	}
}

// Webhooks: the SDK's HTTP receiver (a handler made with
// cloudevents.NewHTTPReceiveHandler) gets every event, in both modes.
func TestSDKReceivesWebhooks(t *testing.T) {
	t.Parallel()
	for _, f := range formats {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			events := map[string]event.Event{}
			proto, err := cloudevents.NewHTTP()
			if err != nil {
				t.Fatal(err)
			}
			h, err := cloudevents.NewHTTPReceiveHandler(ctx, proto, func(_ context.Context, e event.Event) {
				mu.Lock()
				defer mu.Unlock()
				events[e.ID()] = e
			})
			if err != nil {
				t.Fatal(err)
			}
			var signed int
			// The SDK's receive handler takes one request at a time: for
			// concurrent ones its per-request goroutines can take each
			// other's messages, and the first request to end cancels the
			// context the other waits with, leaving a delivery blocked for
			// good. The publisher sends concurrently, so deliveries are
			// passed to it one by one.
			var serial sync.Mutex
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("webhook-id") != "" && r.Header.Get("webhook-signature") != "" {
					mu.Lock()
					signed++
					mu.Unlock()
				}
				serial.Lock()
				defer serial.Unlock()
				h.ServeHTTP(w, r)
			}))
			defer srv.Close()
			pub, err := webhookpub.New(webhookpub.Config{URL: srv.URL, Secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
				CloudEvents: cloudevent.Config{Format: f, Source: "/orders/{tenant}"}})
			if err != nil {
				t.Fatal(err)
			}
			msgs := rows()
			for i, err := range pub.Publish(ctx, msgs) {
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if signed != len(msgs) {
				t.Fatalf("%d signed deliveries, want %d", signed, len(msgs))
			}
			check(t, msgs, events, "/orders/acme")
		})
	}
}

// check compares each event to its row.
func check(t *testing.T, msgs []outbox.Message, events map[string]event.Event, source string) {
	t.Helper()
	if len(events) != len(msgs) {
		t.Fatalf("%d events, want %d", len(events), len(msgs))
	}
	for _, m := range msgs {
		e, ok := events[m.ID]
		if !ok {
			t.Fatalf("no event with id %s", m.ID)
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("event %s: %v", m.ID, err)
		}
		if e.SpecVersion() != "1.0" || e.Type() != m.Type || e.Source() != source || !e.Time().Equal(m.CreatedAt) ||
			e.Subject() != m.Key || e.DataContentType() != "application/json" {
			t.Fatalf("event %s: %s, want type %s source %s time %s subject %q", m.ID, e.String(), m.Type, source, m.CreatedAt, m.Key)
		}
		if !jsonEqual(e.Data(), m.Payload) {
			t.Fatalf("event %s: data %s, want %s", m.ID, e.Data(), m.Payload)
		}
		ext := e.Extensions()
		if fmt.Sprint(ext["traceparent"]) != m.Headers[outbox.HeaderTraceParent] {
			t.Fatalf("event %s: traceparent %v, want %s", m.ID, ext["traceparent"], m.Headers[outbox.HeaderTraceParent])
		}
		if ts := m.Headers[outbox.HeaderTraceState]; ts != "" && fmt.Sprint(ext["tracestate"]) != ts {
			t.Fatalf("event %s: tracestate %v, want %s", m.ID, ext["tracestate"], ts)
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

// headerMessage is a binding.Message over a delivery's headers, built as
// the SDK's protocol modules build theirs (kafka_sarama: prefix ce_, nats:
// ce-, amqp: cloudEvents:): a structured message when the content type is
// a CloudEvents format, else a binary one when the specversion attribute
// is there.
type headerMessage struct {
	w       wire
	prefix  string
	specs   *spec.Versions
	format  format.Format
	version spec.Version
}

func newHeaderMessage(w wire, prefix, contentType string) *headerMessage {
	m := &headerMessage{w: w, prefix: prefix}
	m.specs = spec.WithPrefixMatchExact(func(s string) string {
		if s == "datacontenttype" {
			return contentType
		}
		return prefix + s
	}, prefix)
	if m.format = format.Lookup(w.headers[contentType]); m.format == nil {
		m.version = m.specs.Version(w.headers[m.specs.PrefixedSpecVersionName()])
	}
	return m
}

func (m *headerMessage) ReadEncoding() binding.Encoding {
	switch {
	case m.version != nil:
		return binding.EncodingBinary
	case m.format != nil:
		return binding.EncodingStructured
	}
	return binding.EncodingUnknown
}

func (m *headerMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.format == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, m.format, bytes.NewReader(m.w.body))
}

func (m *headerMessage) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	if m.version == nil {
		return binding.ErrNotBinary
	}
	for k, v := range m.w.headers {
		if attr := m.version.Attribute(k); attr != nil {
			if err := w.SetAttribute(attr, v); err != nil {
				return err
			}
		} else if name, ok := strings.CutPrefix(k, m.prefix); ok {
			if err := w.SetExtension(strings.ToLower(name), v); err != nil {
				return err
			}
		}
	}
	return w.SetData(bytes.NewReader(m.w.body))
}

func (m *headerMessage) Finish(error) error { return nil }

// GetAttribute and GetExtension make it a binding.MessageMetadataReader,
// as the SDK's protocol messages are.
func (m *headerMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	attr := m.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if v, ok := m.w.headers[attr.PrefixedName()]; ok {
		return attr, v
	}
	return attr, nil
}

func (m *headerMessage) GetExtension(name string) any {
	if v, ok := m.w.headers[m.prefix+name]; ok {
		return v
	}
	return nil
}

func publishAll(t *testing.T, p outbox.Publisher, msgs []outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, err := range p.Publish(ctx, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	_ = p.Close()
}

func runNATS(t *testing.T, f cloudevent.Format, source string, msgs []outbox.Message) []wire {
	srv, err := embeddednats.Start(embeddednats.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p, err := natspub.New(context.Background(), nc, natspub.Config{CloudEvents: cloudevent.Config{Format: f, Source: source}})
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, p, msgs)
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), "IDEM")
	if err != nil {
		t.Fatal(err)
	}
	var out []wire
	for seq := uint64(1); seq <= uint64(len(msgs)); seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		w := wire{headers: map[string]string{}, body: m.Data}
		for k, v := range m.Header {
			w.headers[k] = v[0]
		}
		out = append(out, w)
	}
	return out
}

func runKafka(t *testing.T, f cloudevent.Format, source string, msgs []outbox.Message) []wire {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "idem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), CloudEvents: cloudevent.Config{Format: f, Source: source}})
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, p, msgs)
	return consume(t, c.ListenAddrs(), map[string]int{"idem": len(msgs)})["idem"]
}

// consume reads want[topic] records from each topic, in order.
func consume(t *testing.T, brokers []string, want map[string]int) map[string][]wire {
	t.Helper()
	var topics []string
	total := 0
	for tp, n := range want {
		topics = append(topics, tp)
		total += n
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// A bound for a hang, not a speed check.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := map[string][]wire{}
	for n := 0; n < total; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", n, total, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			w := wire{headers: map[string]string{"key": string(r.Key)}, body: r.Value}
			for _, h := range r.Headers {
				w.headers[h.Key] = string(h.Value)
			}
			out[r.Topic] = append(out[r.Topic], w)
			n++
		})
	}
	return out
}

func runAMQP(t *testing.T, f cloudevent.Format, source string, msgs []outbox.Message) []wire {
	x := "ce-" + outbox.NewID()
	q := node.Queue(t, x, "#")
	p, err := amqppub.New(context.Background(), amqppub.Config{URL: node.URL, Exchange: x,
		CloudEvents: cloudevent.Config{Format: f, Source: source}})
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, p, msgs)
	var out []wire
	for _, d := range q.Messages(t) {
		out = append(out, amqpWire(d))
	}
	return out
}

// amqpWire is an AMQP delivery's application properties (the headers
// table) with its content-type property, as the AMQP binding maps them.
func amqpWire(d amqp.Delivery) wire {
	w := wire{headers: map[string]string{"content-type": d.ContentType}, body: d.Body}
	for k, v := range d.Headers {
		w.headers[k] = fmt.Sprint(v)
	}
	return w
}
