// Command kafkaconsumer reads idem's order.placed events from Kafka and
// writes one receipt per order, however often it reads them.
//
// A consumer group resumes from its last committed offset: a consumer that
// committed its work to the database but died before committing the offset
// reads the records again, and the relay itself republishes after a crash
// between publish and mark, with the same idem-id header (Kafka cannot
// drop a copy). The consumer runs its work through package inbox, in the
// transaction that records the id, so a record read again does nothing.
// The offset is committed after the database commit.
//
//	DATABASE_URL=postgres://… KAFKA_BROKERS=host:9092 go run ./examples/kafkaconsumer
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem/examples/receipts"
	"github.com/idemhq/idem/outbox/kafka"
)

// consumerName is both the consumer group and the inbox's consumer name:
// message ids are deduplicated per consumer.
const consumerName = "receipts"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{Brokers: strings.Split(os.Getenv("KAFKA_BROKERS"), ","), Topic: "idem"}
	if err := run(ctx, os.Getenv("DATABASE_URL"), cfg); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	Brokers []string
	// Topic is the relay's topic for order.placed (idem by default, or its
	// route: --publish kafka://…?route.order.placed=orders).
	Topic string
	// noCommit skips committing offsets: what a consumer that died after
	// its database commits looks like to the group. Tests only.
	noCommit bool
	// stats receives counts of what the consumer did. Optional.
	stats *stats
}

type stats = receipts.Stats

// run consumes until ctx ends.
func run(ctx context.Context, dbURL string, cfg config) error {
	store, err := receipts.Open(ctx, dbURL, consumerName, cfg.stats)
	if err != nil {
		return err
	}
	defer store.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumerGroup(consumerName),
		kgo.ConsumeTopics(cfg.Topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fs.Err0(); err != nil {
			return err
		}
		var failed error
		fs.EachRecord(func(r *kgo.Record) {
			if failed == nil {
				_, failed = store.Apply(ctx, recordID(r), r.Value)
			}
		})
		if failed != nil {
			// Offsets stay uncommitted: the group reads the records again.
			return failed
		}
		if !cfg.noCommit {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				return err
			}
		}
	}
}

// recordID is the relay's stable message id (the outbox row's), never the
// offset: a republish after a relay crash has a new offset.
func recordID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == kafka.HeaderID {
			return string(h.Value)
		}
	}
	return ""
}
