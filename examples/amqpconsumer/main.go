// Command amqpconsumer reads idem's order.placed events from RabbitMQ and
// writes one receipt per order, however often the broker delivers it.
//
// RabbitMQ delivers at least once: a message whose consumer dies (or loses
// its channel) before the ack is requeued and delivered again, and the
// relay itself republishes after a crash between publish and mark, with
// the same message-id. The consumer runs its work through package inbox,
// in the transaction that records the message-id, so a redelivery finds
// the id and does nothing. The ack comes after the commit.
//
//	DATABASE_URL=postgres://… AMQP_URL=amqp://… go run ./examples/amqpconsumer
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

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/inbox"
)

// consumerName is both the queue's name and the inbox's consumer name:
// message ids are deduplicated per consumer.
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
	if err := run(ctx, os.Getenv("DATABASE_URL"), os.Getenv("AMQP_URL"), config{Exchange: "idem"}); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	// Exchange is the relay's exchange (idem relay --publish
	// amqp://…?exchange=…; default idem).
	Exchange string
	// requeue, when above zero, hands that many messages back unacked
	// (requeued): what the broker does with the messages of a consumer that
	// died after its commit. Tests only.
	requeue int32
	// stats receives counts of what the consumer did. Optional.
	stats *stats
}

type stats struct {
	applied, duplicates atomic.Int64
}

// run consumes until ctx ends.
func run(ctx context.Context, dbURL, amqpURL string, cfg config) error {
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
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	// A durable queue bound to the relay's exchange for the type, whatever
	// the tenant (routing key <tenant>.<type> by default).
	if err := ch.ExchangeDeclare(cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(consumerName, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.QueueBind(consumerName, "*.order.placed", cfg.Exchange, false, nil); err != nil {
		return err
	}
	if err := ch.Qos(32, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, consumerName, consumerName, false, false, false, false, nil)
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
	for m := range deliveries {
		dup, err := handle(ctx, d, in, m)
		if err != nil {
			slog.Warn("consumer: message not applied", "err", err)
			_ = m.Nack(false, true) // requeued: tried again
			continue
		}
		if dup {
			cfg.stats.duplicates.Add(1)
		} else {
			cfg.stats.applied.Add(1)
		}
		if cfg.requeue > 0 {
			cfg.requeue--
			_ = m.Nack(false, true)
			continue
		}
		_ = m.Ack(false)
	}
	return nil
}

// handle applies one message once: the receipt row and the inbox record
// commit together.
func handle(ctx context.Context, d driver.Driver, in *inbox.Inbox, m amqp.Delivery) (duplicate bool, err error) {
	// The relay's stable message id (the outbox row's), never the
	// delivery tag: a redelivery and a republish have new tags.
	if m.MessageId == "" {
		return false, errors.New("message without a message-id")
	}
	var order struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount"`
	}
	if err := json.Unmarshal(m.Body, &order); err != nil {
		return false, err
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	dup, err := in.Process(ctx, tx, inbox.Delivery{Consumer: consumerName, MessageID: m.MessageId}, func(ctx context.Context, tx driver.Tx) error {
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
