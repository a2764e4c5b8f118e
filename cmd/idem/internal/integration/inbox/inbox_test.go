package inbox_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/cmd/idem/internal/embeddednats"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/natspub"
)

// TestMain runs the tests on a throwaway Postgres, then fails the run if a
// goroutine outlived them (a relay, consumer or connection left running).
func TestMain(m *testing.M) {
	code := testpg.Main(m)
	code = leakcheck.After(code)
	os.Exit(code)
}

// A consumer commits its effect and dies before acking: JetStream
// redelivers the message, and the inbox makes the redelivery a no-op.
func TestRedeliveryAppliedOnce(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
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
		pub, err := natspub.New(ctx, nc, natspub.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m := outbox.Message{ID: outbox.NewID(), Tenant: "default", Type: "thing.done", Key: "k", Payload: json.RawMessage(`{"n":1}`)}
		if errs := pub.Publish(ctx, []outbox.Message{m}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		js, _ := jetstream.New(nc)
		cons, err := js.CreateOrUpdateConsumer(ctx, "IDEM", jetstream.ConsumerConfig{
			Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		in, err := inbox.New(d, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		applied := 0
		deliveries := 0
		for deliveries < 2 {
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for jm := range batch.Messages() {
				deliveries++
				tx, err := d.Begin(ctx, driver.BeginOptions{})
				if err != nil {
					t.Fatal(err)
				}
				dup, err := in.Process(ctx, tx, inbox.Delivery{Consumer: "ledger-projector", MessageID: jm.Headers().Get("Nats-Msg-Id")}, func(ctx context.Context, tx driver.Tx) error {
					applied++
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if deliveries == 1 {
					if dup {
						t.Fatal("first delivery reported as duplicate")
					}
					continue // "crash": committed, never acked; JetStream redelivers
				}
				if !dup {
					t.Fatal("redelivery not recognised as duplicate")
				}
				_ = jm.Ack()
			}
		}
		if applied != 1 {
			t.Fatalf("applied %d times, want 1", applied)
		}
		// The record is the effect's witness: exactly one row for the id.
		n, err := in.DeleteBefore(ctx, time.Now().Add(time.Hour), 100)
		if err != nil || n != 1 {
			t.Fatalf("inbox rows = %d (%v), want 1", n, err)
		}
	})
}

// A rolled-back transaction forgets the claim: the next delivery applies.
func TestRollbackForgets(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		in, err := inbox.New(d, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		for i, wantDup := range []bool{false, false, true} {
			tx, err := d.Begin(ctx, driver.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			dup, err := in.Process(ctx, tx, inbox.Delivery{Consumer: "c", MessageID: "m1"}, func(context.Context, driver.Tx) error { return nil })
			if err != nil || dup != wantDup {
				t.Fatalf("call %d: dup=%v err=%v, want dup=%v", i, dup, err, wantDup)
			}
			if i == 0 {
				_ = tx.Rollback(ctx)
				continue
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A CloudEvent is one message per source and id: the relay's republish
// (same source, same id) is a duplicate; another source's event with the
// same id is not, nor is a plain message whose id spells the pair.
func TestCloudEventSourceAndID(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		in, err := inbox.New(d, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range []struct {
			dl      inbox.Delivery
			wantDup bool
		}{
			{inbox.Delivery{Consumer: "c", MessageID: "e1", Source: "/idem/acme"}, false},
			{inbox.Delivery{Consumer: "c", MessageID: "e1", Source: "/idem/acme"}, true},
			{inbox.Delivery{Consumer: "c", MessageID: "e1", Source: "/idem/other"}, false},
			{inbox.Delivery{Consumer: "c", MessageID: "e1"}, false},
			{inbox.Delivery{Consumer: "c", MessageID: "ce:10:/idem/acmee1"}, false},
			{inbox.Delivery{Consumer: "c", MessageID: "1", Source: "/idem/acmee"}, false},
		} {
			tx, err := d.Begin(ctx, driver.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			applied := false
			dup, err := in.Process(ctx, tx, c.dl, func(context.Context, driver.Tx) error { applied = true; return nil })
			if err != nil || dup != c.wantDup || applied == c.wantDup {
				_ = tx.Rollback(ctx)
				t.Fatalf("delivery %d %+v: dup=%v applied=%v err=%v, want dup=%v", i, c.dl, dup, applied, err, c.wantDup)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
