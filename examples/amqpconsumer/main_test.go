package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testrabbit"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/amqppub"
)

func TestMain(m *testing.M) { os.Exit(idemtest.Main(m)) }

// TestRedeliveryWritesOneReceipt publishes three orders with idem's
// RabbitMQ publisher (one twice, as a relay does after a crash between
// publish and mark), runs the consumer with its first two acks turned
// into requeues (as if it died after committing), and checks that the
// redeliveries came and wrote nothing: three receipts.
func TestRedeliveryWritesOneReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := idemtest.Postgres(t)
	node := testrabbit.Start(t)

	st := &stats{}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, dbURL, node.URL, config{Exchange: "idem", requeue: 2, stats: st}) }()

	pub, err := amqppub.New(ctx, amqppub.Config{URL: node.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var msgs []outbox.Message
	for i := range 3 {
		msgs = append(msgs, outbox.Message{ID: outbox.NewID(), Tenant: "shop", Type: "order.placed", Key: fmt.Sprintf("o-%d", i),
			Payload: fmt.Appendf(nil, `{"order_id":"o-%d","amount":%d}`, i, 100*(i+1)), CreatedAt: time.Now()})
	}
	msgs = append(msgs, msgs[0]) // the relay's republish
	// The queue exists once the consumer declared it; until then the
	// publish comes back unroutable.
	deadline := time.Now().Add(60 * time.Second)
	for _, m := range msgs {
		for {
			err := pub.Publish(ctx, []outbox.Message{m})[0]
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for st.Applied.Load()+st.Duplicates.Load() < 6 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st.Applied.Load() != 3 || st.Duplicates.Load() < 3 {
		t.Fatalf("applied %d, duplicates %d; want 3 applied, the republish and the 2 requeued messages duplicates",
			st.Applied.Load(), st.Duplicates.Load())
	}

	d, err := postgres.Open(ctx, postgres.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var n, sum int64
	if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM receipts`).Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	if n != 3 || sum != 600 {
		t.Fatalf("receipts: %d rows summing to %d, want 3 summing to 600", n, sum)
	}
}
