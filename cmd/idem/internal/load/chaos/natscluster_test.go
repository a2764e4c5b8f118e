package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/cmd/idem/internal/broker"
	"github.com/idemhq/idem/cmd/idem/internal/load/verify"
	"github.com/idemhq/idem/outbox"
)

// The chaos run's NATS cluster with a stream of three replicas, as idem
// serve creates it from nats://…?replicas=3: with any one node down the
// stream still takes messages, and republishing every message after each
// node's restart (the stream's leader moves) adds nothing. The verifier's
// reader counts exactly one message per id, also right after a restart,
// when its consumer may be served by the replica still catching up (a
// reader that stopped at that replica's first empty answer counted the
// messages published while it was down as missing).
func TestNATSClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("the NATS cluster suite is long: -short skips it")
	}
	t.Parallel()
	ctx := context.Background()
	c, err := startNATSCluster(ctx, t.TempDir(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := broker.Open(ctx, c.URL()+"?replicas=3", broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	var sent []outbox.Message
	publish := func(msgs []outbox.Message) {
		t.Helper()
		// The relay's way: an outage is retried until it passes, and a
		// retry publishes again only what was not acknowledged. (Retrying
		// the whole batch never finished on a loaded machine, where 2000
		// acknowledgements took longer than one attempt's bound.) The
		// deadline is for a hang, not a speed check.
		deadline := time.Now().Add(2 * time.Minute)
		for {
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			errs := p.Publish(pctx, msgs)
			cancel()
			var failed error
			var again []outbox.Message
			for i, err := range errs {
				if err == nil {
					continue
				}
				if !errors.Is(err, outbox.ErrBrokerUnavailable) {
					// The relay would count it toward a dead letter.
					t.Fatalf("a cluster fault reported as the message's: %v", err)
				}
				failed = err
				again = append(again, msgs[i])
			}
			if failed == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish: %d of %d message(s) unacknowledged: %v", len(again), len(msgs), failed)
			}
			msgs = again
			time.Sleep(200 * time.Millisecond)
		}
	}
	check := func(when string) {
		t.Helper()
		counts, err := verify.ReadStream(ctx, c.URL())
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if len(counts) != len(sent) {
			t.Errorf("%s: stream holds %d ids, want %d", when, len(counts), len(sent))
		}
		for _, m := range sent {
			if counts[m.ID] != 1 {
				t.Errorf("%s: message %s: %d copies in the stream", when, m.ID, counts[m.ID])
			}
		}
	}
	for node := range natsNodes {
		batch := make([]outbox.Message, 2000)
		for i := range batch {
			batch[i] = outbox.Message{ID: fmt.Sprintf("m%d-%d", node, i), Tenant: "acme", Type: "t.x",
				Key: "k", Payload: []byte(`{}`), CreatedAt: time.Now()}
		}
		c.stop(node)
		publish(batch) // with one of three nodes down
		sent = append(sent, batch...)
		if err := c.start(node); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("right after node %d restarted", node))
		if err := c.waitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
		publish(sent) // every message again: all dropped as duplicates
	}
	check("after the republishing")

	// A relay whose URL names no replicas leaves the stream's three alone.
	p2, err := broker.Open(ctx, c.URL(), broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p2.Close()
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, verify.NATSStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().Config.Replicas; n != natsNodes {
		t.Errorf("stream has %d replicas after a relay without ?replicas, want %d", n, natsNodes)
	}
}
