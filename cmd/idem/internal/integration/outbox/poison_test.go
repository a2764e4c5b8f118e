package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/amqppub"
	"github.com/idemhq/idem/outbox/cloudevent"
	"github.com/idemhq/idem/outbox/kafka"
	"github.com/idemhq/idem/outbox/webhookpub"
)

// poisonBroker is one protocol's publisher, what its broker received, and
// the messages it cannot carry with the words their dead letter must say.
type poisonBroker struct {
	pub      outbox.Publisher
	received func(t *testing.T) map[string]int // message id → copies
	poisons  map[string]outbox.Message         // reason → message
}

// TestPoisonIsDeadLettered: a message the protocol cannot carry (an AMQP
// routing key or header name over 255 bytes, a NATS or HTTP header with a
// line break, a Kafka record over the producer's size) among 100 good ones
// is a dead letter at once, naming why, and the 100 are published: the
// relay does not take it for an outage and stop behind it.
func TestPoisonIsDeadLettered(t *testing.T) {
	brokers := map[string]func(t *testing.T) poisonBroker{
		"amqp": func(t *testing.T) poisonBroker {
			node := rabbit(t)
			x := "poison-" + outbox.NewID()
			q := node.Queue(t, x, "#")
			p, err := amqppub.New(context.Background(), amqppub.Config{URL: node.URL, Exchange: x})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			longKey := poison("k-long-route")
			longKey.Tenant = strings.Repeat("t", outbox.MaxTenantLen)
			longKey.Type = "event." + strings.Repeat("x", 200)
			longName := poison("k-long-header")
			longName.Headers = map[string]string{"x-" + strings.Repeat("h", 300): "v"}
			return poisonBroker{pub: p,
				received: func(t *testing.T) map[string]int {
					c := map[string]int{}
					for _, d := range q.Messages(t) {
						c[d.MessageId]++
					}
					return c
				},
				poisons: map[string]outbox.Message{"routing key of 335 bytes": longKey, "header name of 302 bytes": longName}}
		},
		"nats": func(t *testing.T) poisonBroker {
			st := newStream(t, "")
			forged := poison("order-1\r\nNats-Msg-Id: forged")
			badName := poison("k-bad-name")
			badName.Headers = map[string]string{"bad name": "v"}
			return poisonBroker{pub: st.pub,
				received: func(t *testing.T) map[string]int { return countByID(st.messages(t)) },
				poisons: map[string]outbox.Message{"Idem-Ordering-Key holds a control character": forged,
					`header name "bad name" is not a token`: badName}}
		},
		"kafka": func(t *testing.T) poisonBroker {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "idem"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			p, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			big := poison("k-big")
			big.Payload = json.RawMessage(`{"pad":"` + strings.Repeat("x", 2<<20) + `"}`)
			return poisonBroker{pub: p,
				received: func(t *testing.T) map[string]int { return kafkaIDs(t, c.ListenAddrs()) },
				poisons:  map[string]outbox.Message{"over the producer's batch limit of 1000012 bytes": big}}
		},
		"webhook": func(t *testing.T) poisonBroker {
			var mu sync.Mutex
			got := map[string]int{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				got[r.Header.Get("webhook-id")]++
				mu.Unlock()
			}))
			t.Cleanup(srv.Close)
			p, err := webhookpub.New(webhookpub.Config{URL: srv.URL, Secret: "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
				CloudEvents: cloudevent.Config{Format: cloudevent.Binary}})
			if err != nil {
				t.Fatal(err)
			}
			return poisonBroker{pub: p,
				received: func(t *testing.T) map[string]int {
					mu.Lock()
					defer mu.Unlock()
					c := make(map[string]int, len(got))
					for k, v := range got {
						c[k] = v
					}
					return c
				},
				poisons: map[string]outbox.Message{"Ce-Subject holds a control character": poison("order\n1")}}
		},
	}
	for name, newBroker := range brokers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drivertest.Each(t, func(t *testing.T, d driver.Driver) {
				b := newBroker(t)
				ob, err := outbox.New(d, outbox.Config{MaxPayloadBytes: 4 << 20})
				if err != nil {
					t.Fatal(err)
				}
				var good []outbox.Message
				for i := range 100 {
					good = append(good, msg(fmt.Sprintf("k%d", i), i))
				}
				poisonIDs := map[string]string{}
				batch := append([]outbox.Message(nil), good[:50]...)
				for reason, m := range b.poisons {
					batch = append(batch, m)
					poisonIDs[m.ID] = reason
				}
				enqueue(t, d, ob, append(batch, good[50:]...)...)
				r := runRelay(t, d, outbox.RelayConfig{Publisher: b.pub, BatchSize: 40,
					BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond})
				r.Notify()
				waitDrained(t, d)

				got := b.received(t)
				for _, m := range good {
					if got[m.ID] != 1 {
						t.Errorf("good message %s reached the broker %d times, want 1", m.Key, got[m.ID])
					}
				}
				dead, _, err := ob.Dead(context.Background(), outbox.DeadQuery{})
				if err != nil {
					t.Fatal(err)
				}
				if len(dead) != len(b.poisons) {
					t.Fatalf("%d dead letters, want %d", len(dead), len(b.poisons))
				}
				for _, dl := range dead {
					reason, ok := poisonIDs[dl.ID]
					if !ok || dl.Attempts != 1 || !strings.Contains(dl.LastError, reason) || !strings.Contains(dl.LastError, "undeliverable") {
						t.Errorf("dead letter %.40q after %d attempts: %q, want one attempt naming %q", dl.Key, dl.Attempts, dl.LastError, reason)
					}
					if got[dl.ID] != 0 {
						t.Errorf("poison %.40q reached the broker", dl.Key)
					}
				}
			})
		})
	}
}

// poison is a message with the given ordering key, to be made poisonous.
func poison(key string) outbox.Message {
	m := msg(key, 0)
	m.Payload = json.RawMessage(`{"poison":true}`)
	return m
}

// kafkaIDs reads topic idem (one partition) to its end: the copies of
// each idem-id.
func kafkaIDs(t *testing.T, brokers []string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("idem"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]int{}
	n := 0
	for n < 100 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records of topic idem: %v", n, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			n++
			for _, h := range r.Headers {
				if h.Key == kafka.HeaderID {
					out[string(h.Value)]++
				}
			}
		})
	}
	// Anything past the 100th record (a poison that got through) arrives
	// in the same fetches or not at all within this short wait.
	short, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer stop()
	cl.PollFetches(short).EachRecord(func(r *kgo.Record) {
		for _, h := range r.Headers {
			if h.Key == kafka.HeaderID {
				out[string(h.Value)]++
			}
		}
	})
	return out
}
