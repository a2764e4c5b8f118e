package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/kafka"
)

func TestMain(m *testing.M) { os.Exit(idemtest.Main(m)) }

// TestRereadWritesOneReceipt publishes three orders with idem's Kafka
// publisher (one twice, as a relay does after a crash between publish and
// mark), runs the consumer once without committing offsets (as if it died
// after its database commits) and once more: the second run reads all
// four records again and writes nothing; three receipts.
func TestRereadWritesOneReceipt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := idemtest.Postgres(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "idem"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pub, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := range 3 {
		msgs = append(msgs, outbox.Message{ID: outbox.NewID(), Tenant: "shop", Type: "order.placed", Key: fmt.Sprintf("o-%d", i),
			Payload: fmt.Appendf(nil, `{"order_id":"o-%d","amount":%d}`, i, 100*(i+1)), CreatedAt: time.Now()})
	}
	msgs = append(msgs, msgs[0]) // the relay's republish
	for _, err := range pub.Publish(ctx, msgs) {
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = pub.Close()

	consume := func(noCommit bool) *stats {
		st := &stats{}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- run(runCtx, dbURL, config{Brokers: c.ListenAddrs(), Topic: "idem", noCommit: noCommit, stats: st})
		}()
		// A bound for a hang, not a speed check.
		for deadline := time.Now().Add(60 * time.Second); st.Applied.Load()+st.Duplicates.Load() < 4 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := consume(true); st.Applied.Load() != 3 || st.Duplicates.Load() != 1 {
		t.Fatalf("first run: applied %d, duplicates %d; want 3 and the republish", st.Applied.Load(), st.Duplicates.Load())
	}
	if st := consume(false); st.Applied.Load() != 0 || st.Duplicates.Load() != 4 {
		t.Fatalf("second run: applied %d, duplicates %d; want every record read again as a duplicate",
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
