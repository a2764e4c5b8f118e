package outbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/kafka"
)

// A Kafka publisher with a route table sends three event types to three
// topics, each record keyed by its aggregate so that a key's events are in
// enqueue order within its topic's partition; a type the table lacks
// becomes a dead letter at its first attempt, naming the type, and stops
// only its key.
func TestRoutesToTopics(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		topics := map[string]string{"order.created": "orders", "payment.settled": "payments", "invoice.sent": "invoices"}
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders", "payments", "invoices"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		pub, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Routes: outbox.Routes{Table: topics}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pub.Close() })
		ob := newOutbox(t, d)
		r := runRelay(t, d, outbox.RelayConfig{Publisher: pub, BatchSize: 16, MaxAttempts: 5,
			BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond})

		types := []string{"order.created", "payment.settled", "invoice.sent"}
		want := map[string][]string{} // topic/key -> ids in enqueue order
		const n = 90
		for i := 0; i < n; i += 10 {
			var batch []outbox.Message
			for j := i; j < i+10; j++ {
				m := msg(fmt.Sprintf("acct-%d", j%4), j)
				m.Type = types[(j/4)%3]
				k := topics[m.Type] + "/" + m.Key
				want[k] = append(want[k], m.ID)
				batch = append(batch, m)
			}
			enqueue(t, d, ob, batch...)
		}
		lost := msg("user-1", 0)
		lost.Type = "user.deleted"
		enqueue(t, d, ob, lost)
		r.Notify()
		waitFor(t, "the routed messages published", func() bool { return unsent(t, d) == 0 })

		dead, _, err := ob.Dead(ctx, outbox.DeadQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || dead[0].ID != lost.ID || dead[0].Attempts != 1 ||
			!strings.Contains(dead[0].LastError, `no route for the event type "user.deleted"`) {
			t.Fatalf("dead letters %+v, want %s dead at its first attempt for want of a route", dead, lost.ID)
		}

		got := map[string][]string{}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders", "payments", "invoices"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second) // a bound for a hang
		defer cancel()
		for read := 0; read < n; {
			fs := cl.PollFetches(rctx)
			if rctx.Err() != nil {
				t.Fatalf("read %d of %d records: %v", read, n, rctx.Err())
			}
			fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
			fs.EachRecord(func(rec *kgo.Record) {
				var typ, id string
				for _, h := range rec.Headers {
					switch h.Key {
					case kafka.HeaderType:
						typ = string(h.Value)
					case kafka.HeaderID:
						id = string(h.Value)
					}
				}
				if topics[typ] != rec.Topic {
					t.Fatalf("a %s event on topic %s", typ, rec.Topic)
				}
				k := rec.Topic + "/" + string(rec.Key)
				got[k] = append(got[k], id)
				read++
			})
		}
		for k, ids := range want {
			if !slices.Equal(got[k], ids) {
				t.Fatalf("%s: %v, want %v in enqueue order", k, got[k], ids)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d topic/key streams, want %d", len(got), len(want))
		}
	})
}
