// Command consumer reads idem's order.placed events from NATS JetStream and
// writes one receipt per order, however often the broker delivers it.
//
// JetStream delivers at least once: a consumer that committed its work but
// died (or lost the connection) before its ack gets the message again. The
// consumer runs its work through package inbox, in the transaction that
// records the message id, so a redelivery finds the id and does nothing.
// The ack comes after the commit: acking first would lose the message if
// the process died between the two.
//
//	DATABASE_URL=postgres://… NATS_URL=nats://… go run ./examples/consumer
package main

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/inbox"
)

// consumerName is both the JetStream durable consumer and the inbox's
// consumer name: message ids are deduplicated per consumer.
const consumerName = "receipts"

// createReceipts is the consumer's own table. No unique constraint on
// order_id: the inbox is what keeps a redelivery from writing a second row.
const createReceipts = `CREATE TABLE IF NOT EXISTS receipts (
	id         bigserial PRIMARY KEY,
	order_id   text   NOT NULL,
	amount     bigint NOT NULL
)`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL"), os.Getenv("NATS_URL"), config{AckWait: 30 * time.Second}); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	// AckWait is how long JetStream waits for an ack before redelivering.
	AckWait time.Duration
	// dropAcks, when above zero, skips that many acks: what a consumer that
	// died after its commit looks like to the broker. Tests only.
	dropAcks int32
	// stats receives counts of what the consumer did. Optional.
	stats *stats
}

type stats struct {
	applied, duplicates atomic.Int64
}

// run consumes until ctx ends.
func run(ctx context.Context, dbURL, natsURL string, cfg config) error {
	d, err := postgres.Open(ctx, postgres.Config{URL: dbURL})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		return err
	}
	if err := exec(ctx, d, createReceipts); err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "IDEM", jetstream.ConsumerConfig{
		Durable:       consumerName,
		FilterSubject: "idem.*.order.placed",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
	})
	if err != nil {
		return err
	}
	if cfg.stats == nil {
		cfg.stats = &stats{}
	}
	in, err := inbox.New(d, inbox.Config{})
	if err != nil {
		return err
	}
	dropAcks := atomic.Int32{}
	dropAcks.Store(cfg.dropAcks)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		dup, err := handle(ctx, d, in, m)
		if err != nil {
			// Not acked: JetStream redelivers after AckWait.
			slog.Warn("consumer: message not applied", "err", err)
			return
		}
		if dup {
			cfg.stats.duplicates.Add(1)
		} else {
			cfg.stats.applied.Add(1)
		}
		if dropAcks.Add(-1) >= 0 {
			return
		}
		_ = m.Ack()
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// handle applies one message once: the receipt row and the inbox record
// commit together.
func handle(ctx context.Context, d driver.Driver, in *inbox.Inbox, m jetstream.Msg) (duplicate bool, err error) {
	// The relay's stable message id (the outbox row's), not the JetStream
	// sequence: a republish after a relay crash has a new sequence.
	id := m.Headers().Get(nats.MsgIdHdr)
	if id == "" {
		return false, errors.New("message without Nats-Msg-Id")
	}
	var order struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount"`
	}
	if err := json.Unmarshal(m.Data(), &order); err != nil {
		_ = m.Term() // never valid: do not redeliver
		return false, err
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	dup, err := in.Process(ctx, tx, inbox.Delivery{Consumer: consumerName, MessageID: id}, func(ctx context.Context, tx driver.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO receipts (order_id, amount) VALUES ($1, $2)`, order.OrderID, order.Amount)
		return err
	})
	if err != nil {
		return false, err
	}
	return dup, tx.Commit(ctx)
}

func exec(ctx context.Context, d driver.Driver, sql string) error {
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sql); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
