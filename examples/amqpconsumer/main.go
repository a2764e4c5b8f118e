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
	"errors"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/examples/receipts"
)

// consumerName is both the queue's name and the inbox's consumer name:
// message ids are deduplicated per consumer.
const consumerName = "receipts"

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

type stats = receipts.Stats

// run consumes until ctx ends.
func run(ctx context.Context, dbURL, amqpURL string, cfg config) error {
	store, err := receipts.Open(ctx, dbURL, consumerName, cfg.stats)
	if err != nil {
		return err
	}
	defer store.Close()
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
	for m := range deliveries {
		// The relay's stable message id (the outbox row's), never the
		// delivery tag: a redelivery and a republish have new tags.
		if _, err := store.Apply(ctx, m.MessageId, m.Body); err != nil {
			slog.Warn("consumer: message not applied", "err", err)
			// Requeued to be tried again, unless it can never apply.
			_ = m.Nack(false, !errors.Is(err, receipts.ErrMalformed))
			continue
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
