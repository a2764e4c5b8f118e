package testrabbit

import (
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Queue is a durable queue a test reads what a publisher sent from.
type Queue struct {
	Name string
	url  string
	mu   sync.Mutex
	got  []amqp.Delivery
}

// Queue declares a durable queue bound to exchange (a topic exchange,
// declared when missing) with binding key bind ("#": everything), so that
// what is published there before the test reads it is kept. The queue's
// name is the exchange's with ".q".
func (n *Node) Queue(tb testing.TB, exchange, bind string) *Queue {
	tb.Helper()
	conn, ch := n.channel(tb)
	defer conn.Close()
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		tb.Fatalf("testrabbit: exchange %s: %v", exchange, err)
	}
	q := &Queue{Name: exchange + ".q", url: n.URL}
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, nil); err != nil {
		tb.Fatalf("testrabbit: queue %s: %v", q.Name, err)
	}
	if err := ch.QueueBind(q.Name, bind, exchange, false, nil); err != nil {
		tb.Fatalf("testrabbit: bind %s: %v", q.Name, err)
	}
	return q
}

func (n *Node) channel(tb testing.TB) (*amqp.Connection, *amqp.Channel) {
	tb.Helper()
	return dial(tb, n.URL)
}

func dial(tb testing.TB, url string) (*amqp.Connection, *amqp.Channel) {
	tb.Helper()
	var conn *amqp.Connection
	var err error
	// A node just restarted may refuse the first connections while it
	// recovers its queues; a bound for a hang, not a speed check.
	for deadline := time.Now().Add(60 * time.Second); ; {
		if conn, err = amqp.Dial(url); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("testrabbit: dial: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		tb.Fatalf("testrabbit: channel: %v", err)
	}
	return conn, ch
}

// Messages returns every message the queue has held so far: it takes
// (and acknowledges) what is in the queue now and adds it to what earlier
// calls took.
func (q *Queue) Messages(tb testing.TB) []amqp.Delivery {
	tb.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	conn, ch := dial(tb, q.url)
	defer conn.Close()
	for {
		d, ok, err := ch.Get(q.Name, true)
		if err != nil {
			tb.Fatalf("testrabbit: get from %s: %v", q.Name, err)
		}
		if !ok {
			break
		}
		q.got = append(q.got, d)
	}
	return append([]amqp.Delivery(nil), q.got...)
}
