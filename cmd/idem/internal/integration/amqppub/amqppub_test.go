package amqppub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/cmd/idem/internal/broker"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testrabbit"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/amqppub"
	"github.com/idemhq/idem/outbox/outboxtest"
)

// node is the package's RabbitMQ node; each test uses exchanges and
// queues of its own names.
var node *testrabbit.Node

func TestMain(m *testing.M) {
	var err error
	if node, err = testrabbit.StartMain(); err != nil {
		fmt.Fprintln(os.Stderr, "testrabbit:", err)
		os.Exit(1)
	}
	code := m.Run()
	node.Stop()
	code = leakcheck.After(code)
	os.Exit(code)
}

// exchange is a name of the test's own.
func exchange(t *testing.T) string { return "x-" + outbox.NewID() }

func newPublisher(t *testing.T, cfg amqppub.Config) *amqppub.Publisher {
	t.Helper()
	cfg.URL = node.URL
	p, err := amqppub.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness {
		x := exchange(t)
		q := node.Queue(t, x, "#")
		p, err := amqppub.New(context.Background(), amqppub.Config{URL: node.URL, Exchange: x})
		if err != nil {
			t.Fatal(err)
		}
		return outboxtest.Harness{Publisher: p, Received: func(t *testing.T) []outboxtest.Received {
			var out []outboxtest.Received
			for _, d := range q.Messages(t) {
				if d.DeliveryMode != amqp.Persistent || d.RoutingKey != "acme."+d.Type {
					t.Fatalf("delivery mode %d, routing key %q", d.DeliveryMode, d.RoutingKey)
				}
				key, _ := d.Headers[amqppub.HeaderKey].(string)
				out = append(out, outboxtest.Received{ID: d.MessageId, Type: d.Type, Key: key, Payload: d.Body})
			}
			return out
		}}
	})
}

func msg(typ, key string) outbox.Message {
	return outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: typ, Key: key,
		Payload: json.RawMessage(`{"n":1}`), CreatedAt: time.Now().UTC()}
}

func publish(t *testing.T, p outbox.Publisher, msgs ...outbox.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := p.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(errs), len(msgs))
	}
	return errs
}

// A message no queue is bound for comes back (mandatory publishing): it
// is undeliverable, a dead letter at once, while its batch's routed
// messages are published.
func TestReturnIsUndeliverable(t *testing.T) {
	t.Parallel()
	x := exchange(t)
	q := node.Queue(t, x, "acme.order.*")
	p := newPublisher(t, amqppub.Config{Exchange: x})
	routed, lost := msg("order.created", "o1"), msg("invoice.sent", "i1")
	errs := publish(t, p, routed, lost)
	if errs[0] != nil {
		t.Fatalf("routed message: %v", errs[0])
	}
	if !errors.Is(errs[1], outbox.ErrUndeliverable) || errors.Is(errs[1], outbox.ErrBrokerUnavailable) {
		t.Fatalf("unrouted message: %v, want ErrUndeliverable", errs[1])
	}
	got := q.Messages(t)
	if len(got) != 1 || got[0].MessageId != routed.ID {
		t.Fatalf("queue holds %d messages, want only %s", len(got), routed.ID)
	}
}

// A queue that rejects publishes when full nacks the message: a refusal
// the relay retries (counted as an attempt), neither an outage nor a dead
// letter at once.
func TestNackIsRetry(t *testing.T) {
	t.Parallel()
	x := exchange(t)
	conn, err := amqp.Dial(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(x, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	qn := x + ".full"
	if _, err := ch.QueueDeclare(qn, true, false, false, false,
		amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(qn, "#", x, false, nil); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, amqppub.Config{Exchange: x})
	if errs := publish(t, p, msg("a.b", "k1")); errs[0] != nil {
		t.Fatal(errs[0])
	}
	errs := publish(t, p, msg("a.b", "k2"))
	if errs[0] == nil || errors.Is(errs[0], outbox.ErrBrokerUnavailable) || errors.Is(errs[0], outbox.ErrUndeliverable) {
		t.Fatalf("a nacked message: %v, want a plain refusal", errs[0])
	}
	// The channel is still usable after a nack.
	if _, err := ch.QueuePurge(qn, false); err != nil {
		t.Fatal(err)
	}
	if errs := publish(t, p, msg("a.b", "k3")); errs[0] != nil {
		t.Fatalf("after a nack: %v", errs[0])
	}
}

// Routes send each type to its routing key; a type the table lacks (and
// no template covers) is undeliverable before it reaches the broker.
func TestRoutes(t *testing.T) {
	t.Parallel()
	x := exchange(t)
	q := node.Queue(t, x, "#")
	p := newPublisher(t, amqppub.Config{Exchange: x, Routes: outbox.Routes{Table: map[string]string{
		"order.created": "orders", "invoice.sent": "billing.invoices"}}})
	a, b, c := msg("order.created", "o1"), msg("invoice.sent", "i1"), msg("user.deleted", "u1")
	errs := publish(t, p, a, b, c)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("routed: %v, %v", errs[0], errs[1])
	}
	if !errors.Is(errs[2], outbox.ErrUnroutable) || !errors.Is(errs[2], outbox.ErrUndeliverable) {
		t.Fatalf("unroutable type: %v", errs[2])
	}
	keys := map[string]string{}
	for _, d := range q.Messages(t) {
		keys[d.MessageId] = d.RoutingKey
	}
	if len(keys) != 2 || keys[a.ID] != "orders" || keys[b.ID] != "billing.invoices" {
		t.Fatalf("routing keys %v", keys)
	}
}

// A wrong password is refused at New, saying so.
func TestRefusedCredentials(t *testing.T) {
	t.Parallel()
	u, err := amqp.ParseURI(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Password = "wrong"
	_, err = amqppub.New(context.Background(), amqppub.Config{URL: u.String()})
	if err == nil {
		t.Fatal("New with a wrong password succeeded")
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
		t.Fatalf("wrong password: %v, want ACCESS_REFUSED", err)
	}
}

// idem relay's --publish amqp://…: the password from a file, the exchange
// and a route from the query; a wrong password fails at open, naming the
// broker without the password.
func TestOpenURL(t *testing.T) {
	t.Parallel()
	u, err := amqp.ParseURI(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	x := exchange(t)
	q := node.Queue(t, x, "#")
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte(u.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("amqp://%s@%s:%d/", u.Username, u.Host, u.Port)
	p, err := broker.Open(context.Background(), base+"?password_file="+pw+"&exchange="+x+"&route=r.{type}", broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := msg("a.b", "k")
	if errs := publish(t, p, m); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got := q.Messages(t); len(got) != 1 || got[0].MessageId != m.ID || got[0].RoutingKey != "r.a.b" {
		t.Fatalf("queue holds %+v", got)
	}
	wrong := fmt.Sprintf("amqp://%s:sekrit@%s:%d/", u.Username, u.Host, u.Port)
	if _, err := broker.Open(context.Background(), wrong, broker.Config{}); err == nil || strings.Contains(err.Error(), "sekrit") {
		t.Fatalf("wrong password: %v", err)
	}
}

// doneAt is a context whose Done is closed at its n-th call only: the
// publish of the n-th message of a batch (amqp091 checks Done before each
// publish) finds the context ended, the others do not.
type doneAt struct {
	context.Context
	calls, n int
}

func (c *doneAt) Done() <-chan struct{} {
	c.calls++
	if c.calls == c.n {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return nil
}

func (c *doneAt) Err() error {
	if c.calls >= c.n {
		return context.DeadlineExceeded
	}
	return nil
}

// A publish that fails mid-batch drops the connection: the batch's
// messages already sent get an answer each (published, or an outage when
// the closing connection nacked their confirms), the rest an outage, and
// the next batch dials again and is published.
func TestPublishFailsMidBatch(t *testing.T) {
	t.Parallel()
	x := exchange(t)
	q := node.Queue(t, x, "#")
	p := newPublisher(t, amqppub.Config{Exchange: x})
	msgs := []outbox.Message{msg("a.b", "k1"), msg("a.b", "k2"), msg("a.b", "k3"), msg("a.b", "k4"), msg("a.b", "k5")}
	errs := p.Publish(&doneAt{Context: context.Background(), n: 4}, msgs)
	for i, err := range errs {
		if (i >= 3 || err != nil) && !errors.Is(err, outbox.ErrBrokerUnavailable) {
			t.Fatalf("message %d: %v, want published or an outage (and an outage from the 4th)", i, err)
		}
	}
	var again []outbox.Message
	for i, err := range errs {
		if err != nil {
			again = append(again, msgs[i])
		}
	}
	for i, err := range publish(t, p, again...) {
		if err != nil {
			t.Fatalf("republish %d: %v", i, err)
		}
	}
	got := map[string]bool{}
	for _, d := range q.Messages(t) {
		got[d.MessageId] = true
	}
	for _, m := range msgs {
		if !got[m.ID] {
			t.Fatalf("message %s missing from the queue", m.ID)
		}
	}
}
