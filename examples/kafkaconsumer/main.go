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
	"encoding/json"
	"errors"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/outbox/kafka"
)

// consumerName is both the consumer group and the inbox's consumer name:
// message ids are deduplicated per consumer.
const consumerName = "receipts"

// createReceipts is the consumer's own table. No unique constraint on
// order_id: the inbox is what keeps a record read again from writing a
// second row.
const createReceipts = `CREATE TABLE IF NOT EXISTS receipts (
	id         bigserial PRIMARY KEY,
	order_id   text   NOT NULL,
	amount     bigint NOT NULL
)`

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

type stats struct {
	applied, duplicates atomic.Int64
}

// run consumes until ctx ends.
func run(ctx context.Context, dbURL string, cfg config) error {
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumerGroup(consumerName),
		kgo.ConsumeTopics(cfg.Topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if cfg.stats == nil {
		cfg.stats = &stats{}
	}
	in, err := inbox.New(d, inbox.Config{})
	if err != nil {
		return err
	}
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
			if failed != nil {
				return
			}
			dup, err := handle(ctx, d, in, r)
			switch {
			case err != nil:
				failed = err
			case dup:
				cfg.stats.duplicates.Add(1)
			default:
				cfg.stats.applied.Add(1)
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

// handle applies one record once: the receipt row and the inbox record
// commit together.
func handle(ctx context.Context, d driver.Driver, in *inbox.Inbox, r *kgo.Record) (duplicate bool, err error) {
	// The relay's stable message id (the outbox row's), never the offset:
	// a republish after a relay crash has a new offset.
	var id string
	for _, h := range r.Headers {
		if h.Key == kafka.HeaderID {
			id = string(h.Value)
		}
	}
	if id == "" {
		return false, errors.New("record without " + kafka.HeaderID)
	}
	var order struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount"`
	}
	if err := json.Unmarshal(r.Value, &order); err != nil {
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
