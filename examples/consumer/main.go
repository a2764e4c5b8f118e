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

	"github.com/idemhq/idem/examples/receipts"
)

// consumerName is both the JetStream durable consumer and the inbox's
// consumer name: message ids are deduplicated per consumer.
const consumerName = "receipts"

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

type stats = receipts.Stats

// run consumes until ctx ends.
func run(ctx context.Context, dbURL, natsURL string, cfg config) error {
	store, err := receipts.Open(ctx, dbURL, consumerName, cfg.stats)
	if err != nil {
		return err
	}
	defer store.Close()
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
	dropAcks := atomic.Int32{}
	dropAcks.Store(cfg.dropAcks)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		// The relay's stable message id (the outbox row's), not the
		// JetStream sequence: a republish after a relay crash has a new one.
		id := m.Headers().Get(nats.MsgIdHdr)
		if id == "" {
			slog.Warn("consumer: message without Nats-Msg-Id")
			_ = m.Term()
			return
		}
		if _, err := store.Apply(ctx, id, m.Data()); err != nil {
			if errors.Is(err, receipts.ErrMalformed) {
				_ = m.Term() // never valid: do not redeliver
			}
			// Otherwise not acked: JetStream redelivers after AckWait.
			slog.Warn("consumer: message not applied", "err", err)
			return
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
