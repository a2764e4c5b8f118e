// Package receipts is what the consumer examples (consumer, amqpconsumer,
// kafkaconsumer) share: the receipts table and the one way they apply an
// order.placed event, once per message id however often the broker
// delivers it. Each example keeps only what is its broker's: how it
// receives, which header carries the relay's message id, and when it acks.
//
// Apply runs the work through package inbox, in the transaction that
// records the message id, so a redelivery finds the id and does nothing.
// The caller acks (or commits its offset) after Apply returns: acking
// first would lose the message if the process died between the two.
package receipts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/inbox"
)

// createTable is the consumers' own table. No unique constraint on
// order_id: the inbox is what keeps a redelivery from writing a second row.
const createTable = `CREATE TABLE IF NOT EXISTS receipts (
	id         bigserial PRIMARY KEY,
	order_id   text   NOT NULL,
	amount     bigint NOT NULL
)`

// Stats counts what a consumer did.
type Stats struct {
	Applied, Duplicates atomic.Int64
}

// ErrMalformed is Apply's error for a body that is no order.placed event:
// it never will be, so the consumer should not have it delivered again.
var ErrMalformed = errors.New("receipts: not an order.placed event")

// Store applies events for one consumer.
type Store struct {
	d        driver.Driver
	in       *inbox.Inbox
	consumer string
	stats    *Stats
}

// Open opens the PostgreSQL at dbURL, applies idem's migrations and the
// receipts table, and returns a Store that records message ids under
// consumer (ids are deduplicated per consumer) and counts into stats.
func Open(ctx context.Context, dbURL, consumer string, stats *Stats) (*Store, error) {
	d, err := postgres.Open(ctx, postgres.Config{URL: dbURL})
	if err != nil {
		return nil, err
	}
	if err := setup(ctx, d); err != nil {
		d.Close()
		return nil, err
	}
	in, err := inbox.New(d, inbox.Config{})
	if err != nil {
		d.Close()
		return nil, err
	}
	if stats == nil {
		stats = &Stats{}
	}
	return &Store{d: d, in: in, consumer: consumer, stats: stats}, nil
}

// Close closes the database.
func (s *Store) Close() { s.d.Close() }

func setup(ctx context.Context, d driver.Driver) error {
	if err := d.Migrate(ctx); err != nil {
		return err
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, createTable); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Apply applies the event body of message id once: the receipt row and
// the inbox record commit together. id is the relay's stable message id
// (the outbox row's), never a broker's delivery number: a redelivery and
// a republish after a relay crash have new ones.
func (s *Store) Apply(ctx context.Context, id string, body []byte) (duplicate bool, err error) {
	if id == "" {
		return false, errors.New("receipts: empty message id")
	}
	var order struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount"`
	}
	if err := json.Unmarshal(body, &order); err != nil {
		return false, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	tx, err := s.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	dup, err := s.in.Process(ctx, tx, inbox.Delivery{Consumer: s.consumer, MessageID: id}, func(ctx context.Context, tx driver.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO receipts (order_id, amount) VALUES ($1, $2)`, order.OrderID, order.Amount)
		return err
	})
	if err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	if dup {
		s.stats.Duplicates.Add(1)
	} else {
		s.stats.Applied.Add(1)
	}
	return dup, nil
}
