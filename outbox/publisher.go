package outbox

import (
	"context"
	"errors"
	"fmt"
)

// Publisher sends messages to a broker. The relay calls Publish with
// messages of pairwise distinct ordering keys (one message in flight per
// key), so a publisher may send them concurrently or pipelined.
//
// Publish returns one error per message, in order: nil when the broker
// acknowledged it (it is durable there, or delivered for webhooks). A
// message must carry its ID as the broker's deduplication id, so that a
// republish after a crash is recognised where the broker can.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) []error
	// Close releases the publisher's connections.
	Close() error
}

// ErrBrokerUnavailable marks a publish error as the broker's, not the
// message's: the broker could not be reached, timed out or is overloaded.
// The relay does not count it as an attempt on the message (no dead letter
// comes of an outage); it backs off as a whole and tries again. (A database
// that cannot be reached is idem.ErrUnavailable.)
var ErrBrokerUnavailable = errors.New("outbox: broker unavailable")

// BrokerUnavailable wraps err with ErrBrokerUnavailable.
func BrokerUnavailable(err error) error {
	if err == nil || errors.Is(err, ErrBrokerUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrBrokerUnavailable, err)
}

// Errs returns n copies of err, for a publisher that fails a whole batch.
func Errs(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// ErrUndeliverable marks a publish error that no retry can cure: the
// broker has nowhere to put the message (no route for its type, a
// RabbitMQ return of a mandatory publish). The relay makes the message a
// dead letter at once, with the error as its reason, instead of retrying
// it MaxAttempts times; only its key stops, and Redrive sends it again
// once a route exists.
var ErrUndeliverable = errors.New("outbox: undeliverable")

// Undeliverable wraps err with ErrUndeliverable.
func Undeliverable(err error) error {
	if err == nil || errors.Is(err, ErrUndeliverable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUndeliverable, err)
}
