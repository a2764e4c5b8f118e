package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testrabbit"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/amqppub"
)

var (
	rabbitOnce sync.Once
	rabbitNode *testrabbit.Node
	rabbitErr  error
)

// rabbit is the package's RabbitMQ node, started on first use (a node
// takes tens of seconds to start on a loaded machine) and stopped by
// TestMain. Tests use exchanges and queues of their own names.
func rabbit(t testing.TB) *testrabbit.Node {
	t.Helper()
	rabbitOnce.Do(func() { rabbitNode, rabbitErr = testrabbit.StartMain() })
	if rabbitErr != nil {
		t.Fatalf("testrabbit: %v", rabbitErr)
	}
	return rabbitNode
}

func stopRabbit() {
	if rabbitNode != nil {
		rabbitNode.Stop()
	}
}

// The relay process killed at a failpoint is restarted. Killed between
// commit and publish, the message reaches RabbitMQ once; killed after the
// publish and before the mark, twice, both with the row's id as
// message-id (RabbitMQ cannot drop a republish; the consumer's inbox
// does). Counted on the broker, in a durable queue bound to the exchange.
func TestCrashAtFailpointRabbitMQ(t *testing.T) {
	for _, c := range []struct {
		fp           string
		before, want int
	}{
		{outbox.FailpointBeforePublish, 0, 1},
		{outbox.FailpointAfterPublish, 1, 2},
	} {
		t.Run(c.fp, func(t *testing.T) {
			t.Parallel()
			dbURL, d := crashDB(t)
			node := rabbit(t)
			x := "crash-" + outbox.NewID()
			q := node.Queue(t, x, "#")
			publishURL := node.URL + "?exchange=" + x
			ob := newOutbox(t, d)
			m := msg("k", 1)
			enqueue(t, d, ob, m)

			p := startRelay(t, dbURL, publishURL, c.fp)
			p.waitFailpoint(t, c.fp)
			p.kill()
			if n := copiesOf(t, q, m.ID); n != c.before {
				t.Fatalf("killed at %s: the queue holds %d copies, want %d", c.fp, n, c.before)
			}
			if n := unsent(t, d); n != 1 {
				t.Fatalf("killed relay left %d unsent rows, want 1", n)
			}

			startRelay(t, dbURL, publishURL, "")
			waitDrained(t, d)
			got := q.Messages(t)
			if len(got) != c.want {
				t.Fatalf("the queue holds %d messages, want %d copies of %s", len(got), c.want, m.ID)
			}
			for _, dl := range got {
				if dl.MessageId != m.ID {
					t.Fatalf("the queue holds message-id %s, want only %s", dl.MessageId, m.ID)
				}
			}
		})
	}
}

func copiesOf(t *testing.T, q *testrabbit.Queue, id string) int {
	n := 0
	for _, d := range q.Messages(t) {
		if d.MessageId == id {
			n++
		}
	}
	return n
}

// RabbitMQ is killed and started again while a relay publishes: the relay
// waits out the outage (no dead letter, no attempt counted) and, once the
// broker is back, publishes the rest. Nothing is lost: every message is
// in the durable queue (a copy only where a confirm was lost with the
// connection), and a consumer with the inbox applies each exactly once.
func TestRabbitMQRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, d := crashDB(t)
	node := testrabbit.Start(t) // killed below: a node of its own
	x := "restart-" + outbox.NewID()
	q := node.Queue(t, x, "#")
	pub, err := amqppub.New(ctx, amqppub.Config{URL: node.URL, Exchange: x, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	ob := newOutbox(t, d)
	runRelay(t, d, outbox.RelayConfig{Publisher: pub, BatchSize: 20,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 500 * time.Millisecond})

	const n = 300
	var ids []string
	for i := 0; i < n; i += 10 {
		if i == n/2 {
			node.Restart(t)
		}
		var batch []outbox.Message
		for j := i; j < i+10; j++ {
			m := msg(fmt.Sprintf("k%d", j%7), j)
			ids = append(ids, m.ID)
			batch = append(batch, m)
		}
		enqueue(t, d, ob, batch...)
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, "the backlog to drain after the restart", func() bool { return unsent(t, d) == 0 })
	dead, _, err := ob.Dead(ctx, outbox.DeadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 0 {
		t.Fatalf("%d dead letters from an outage", len(dead))
	}

	in, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	applied := map[string]int{}
	got := q.Messages(t)
	for _, dl := range got {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = in.Process(ctx, tx, inbox.Delivery{Consumer: "restart", MessageID: dl.MessageId},
			func(context.Context, driver.Tx) error { applied[dl.MessageId]++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if applied[id] != 1 {
			t.Fatalf("message %s applied %d times", id, applied[id])
		}
	}
	if len(applied) != n {
		t.Fatalf("%d distinct messages applied, want %d", len(applied), n)
	}
	t.Logf("%d deliveries for %d messages", len(got), n)
}
