// Package natsrelay is the outbox relay the service examples (httpservice,
// rpcservice, the stack recipes' shop) run: it publishes their committed
// outbox rows to NATS JetStream, each message under its stable id, so the
// stream drops a republished copy.
package natsrelay

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/natspub"
)

// Run publishes d's outbox to the NATS server at natsURL until ctx ends.
// Any number of relays may share the database: each leases the shards it
// publishes.
func Run(ctx context.Context, d driver.Driver, natsURL string) error {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	pub, err := natspub.New(ctx, nc, natspub.Config{CloseConn: true})
	if err != nil {
		nc.Close()
		return err
	}
	defer pub.Close()
	// A short lease lets a restarted relay take over quickly after a crash.
	r, err := outbox.NewRelay(d, outbox.RelayConfig{Publisher: pub, LeaseTTL: time.Second, PollInterval: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
