package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/natspub"
)

func TestMain(m *testing.M) { os.Exit(idemtest.Main(m)) }

// TestRedeliveryWritesOneReceipt publishes three orders with idem's NATS
// publisher, runs the consumer with its first two acks lost (as if it died
// after committing), and checks that the redeliveries came and wrote
// nothing: three receipts.
func TestRedeliveryWritesOneReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := idemtest.Postgres(t)
	natsURL, _ := idemtest.NATS(t)

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := natspub.New(ctx, nc, natspub.Config{CloseConn: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var msgs []outbox.Message
	for i := range 3 {
		msgs = append(msgs, outbox.Message{ID: outbox.NewID(), Tenant: "shop", Type: "order.placed",
			Payload: fmt.Appendf(nil, `{"order_id":"o-%d","amount":%d}`, i, 100*(i+1))})
	}
	for _, err := range pub.Publish(ctx, msgs) {
		if err != nil {
			t.Fatal(err)
		}
	}

	st := &stats{}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, dbURL, natsURL, config{AckWait: time.Second, dropAcks: 2, stats: st}) }()
	deadline := time.Now().Add(15 * time.Second)
	for st.Duplicates.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st.Applied.Load() != 3 || st.Duplicates.Load() < 2 {
		t.Fatalf("applied %d, duplicates %d; want 3 applied and the 2 unacked messages redelivered as duplicates", st.Applied.Load(), st.Duplicates.Load())
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
