package outbox_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/amqppub"
)

// BenchmarkRelayDrain drains a backlog of b.N rows (run with
// -benchtime=100000x) from Postgres into a file-backed embedded JetStream,
// and measures the JetStream ceiling in the same run: raw async publishes
// with message ids into the same kind of stream. The relay's batch size is
// 2000, or RELAY_BATCH.
func BenchmarkRelayDrain(b *testing.B) {
	ctx := context.Background()
	d := drivertest.Open(b, "postgres")
	ob := newOutbox(b, d)
	st := newStream(b, "")
	const perTx = 1000
	for i := 0; i < b.N; i += perTx {
		var batch []outbox.Message
		for j := i; j < min(i+perTx, b.N); j++ {
			batch = append(batch, msg(fmt.Sprintf("k%d", j%1000), j))
		}
		enqueue(b, d, ob, batch...)
	}
	b.ResetTimer()
	start := time.Now()
	// Completion is watched through the publisher's acks, then confirmed
	// with one count of unsent rows: counting the whole table in a loop
	// would take a core from the database under test.
	var acked atomic.Int64
	pub := &latencyPub{inner: st.pub, done: func(string) { acked.Add(1) }}
	batch := 2000
	if v, err := strconv.Atoi(os.Getenv("RELAY_BATCH")); err == nil {
		batch = v
	}
	r := runRelay(b, d, outbox.RelayConfig{Publisher: pub, BatchSize: batch})
	r.Notify()
	waitForN(b, func() bool { return acked.Load() >= int64(b.N) })
	for unsent(b, d) != 0 {
		time.Sleep(10 * time.Millisecond)
	}
	relayRate := float64(b.N) / time.Since(start).Seconds()
	b.StopTimer()

	// The ceiling: the same messages straight into a fresh stream.
	ceil := newStream(b, "")
	js := ceil.js
	start = time.Now()
	for i := 0; i < b.N; i += perTx {
		var futs []jetstream.PubAckFuture
		for j := i; j < min(i+perTx, b.N); j++ {
			m := msg("k", j)
			f, err := js.PublishAsync("idem.default.test.happened", m.Payload, jetstream.WithMsgID(m.ID))
			if err != nil {
				b.Fatal(err)
			}
			futs = append(futs, f)
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
	}
	ceilRate := float64(b.N) / time.Since(start).Seconds()
	_ = ctx
	b.ReportMetric(relayRate, "msgs/s")
	b.ReportMetric(ceilRate, "ceiling_msgs/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCommitToPublish enqueues one message per commit at a steady
// rate (about 1000/s) with Notify after each commit and reports the commit
// to broker-ack latency percentiles.
func BenchmarkCommitToPublish(b *testing.B) {
	d := drivertest.Open(b, "postgres")
	ob := newOutbox(b, d)
	st := newStream(b, "")
	var mu sync.Mutex
	committed := map[string]time.Time{}
	early := map[string]bool{} // acknowledged before Commit returned
	var lat []time.Duration
	pub := &latencyPub{inner: st.pub, done: func(id string) {
		mu.Lock()
		defer mu.Unlock()
		if t, ok := committed[id]; ok {
			lat = append(lat, time.Since(t))
		} else {
			early[id] = true
		}
	}}
	r := runRelay(b, d, outbox.RelayConfig{Publisher: pub})
	b.ResetTimer()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for i := range b.N {
		<-tick.C
		m := msg(fmt.Sprintf("k%d", i%100), i)
		enqueue(b, d, ob, m)
		mu.Lock()
		if early[m.ID] {
			// A poll found the row between its commit and this line.
			lat = append(lat, 0)
		} else {
			committed[m.ID] = time.Now()
		}
		mu.Unlock()
		r.Notify()
	}
	waitForN(b, func() bool { mu.Lock(); defer mu.Unlock(); return len(lat) >= b.N })
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
}

type latencyPub struct {
	inner outbox.Publisher
	done  func(id string)
}

func (p *latencyPub) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := p.inner.Publish(ctx, msgs)
	for i, m := range msgs {
		if errs[i] == nil {
			p.done(m.ID)
		}
	}
	return errs
}

func (p *latencyPub) Close() error { return nil }

func waitForN(b *testing.B, cond func() bool) {
	deadline := time.Now().Add(10 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatal("benchmark timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkRelayDrainRabbitMQ drains a backlog of b.N rows (run with
// -benchtime=100000x) from Postgres into RabbitMQ (a private node from
// scripts/rabbitmq; a durable queue bound to the exchange, so each
// persistent message is confirmed once on disk), and measures the broker's
// ceiling in the same run: a plain amqp091 publisher with confirms on,
// pipelined 1000 messages at a time, into a queue of the same kind. The
// relay's batch size is 2000, or RELAY_BATCH.
func BenchmarkRelayDrainRabbitMQ(b *testing.B) {
	ctx := context.Background()
	d := drivertest.Open(b, "postgres")
	ob := newOutbox(b, d)
	node := rabbit(b)
	x := "bench-" + outbox.NewID()
	node.Queue(b, x, "#")
	const perTx = 1000
	for i := 0; i < b.N; i += perTx {
		var batch []outbox.Message
		for j := i; j < min(i+perTx, b.N); j++ {
			batch = append(batch, msg(fmt.Sprintf("k%d", j%1000), j))
		}
		enqueue(b, d, ob, batch...)
	}
	p, err := amqppub.New(ctx, amqppub.Config{URL: node.URL, Exchange: x})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	batch := 2000
	if v, err := strconv.Atoi(os.Getenv("RELAY_BATCH")); err == nil {
		batch = v
	}
	b.ResetTimer()
	start := time.Now()
	var acked atomic.Int64
	pub := &latencyPub{inner: p, done: func(string) { acked.Add(1) }}
	// The shipped lease, so the shipped publish timeout (10s): a round of
	// 1000 persistent messages can take a second to be confirmed on a
	// loaded machine, longer than the 1s the tests' short lease gives.
	r := runRelay(b, d, outbox.RelayConfig{Publisher: pub, BatchSize: batch, LeaseTTL: 30 * time.Second})
	r.Notify()
	waitForN(b, func() bool { return acked.Load() >= int64(b.N) })
	for unsent(b, d) != 0 {
		time.Sleep(10 * time.Millisecond)
	}
	relayRate := float64(b.N) / time.Since(start).Seconds()
	b.StopTimer()

	// The ceiling: the same messages straight into a fresh exchange and
	// queue, with confirms.
	cx := "ceiling-" + outbox.NewID()
	node.Queue(b, cx, "#")
	conn, err := amqp.Dial(node.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	for i := 0; i < b.N; i += perTx {
		var confs []*amqp.DeferredConfirmation
		for j := i; j < min(i+perTx, b.N); j++ {
			m := msg("k", j)
			c, err := ch.PublishWithDeferredConfirmWithContext(ctx, cx, "default.test.happened", true, false, amqp.Publishing{
				MessageId: m.ID, DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: m.Payload})
			if err != nil {
				b.Fatal(err)
			}
			confs = append(confs, c)
		}
		for _, c := range confs {
			if ok, err := c.WaitContext(ctx); err != nil || !ok {
				b.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
	ceilRate := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(relayRate, "msgs/s")
	b.ReportMetric(ceilRate, "ceiling_msgs/s")
	b.ReportMetric(0, "ns/op")
}
