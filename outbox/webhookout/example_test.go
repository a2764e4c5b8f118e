package webhookout_test

import (
	"context"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/webhookout"
)

// The pieces as idem serve runs them (docs/webhooks-out.md, "From Go"):
// endpoints registered in the caller's transaction, the fan-out in front
// of the broker's publisher, the deliverer beside the relay.
func Example() {
	ctx := context.Background()
	var d driver.Driver                  // postgres.Open or sqlite.Open, migrated
	var tx driver.Tx                     // the caller's transaction
	var brokerPublisher outbox.Publisher // natspub, kafka, … or nil

	eps, _ := webhookout.New(d, webhookout.Config{}) // register in your own transaction
	ep, _ := eps.Create(ctx, tx, "acme", webhookout.NewEndpoint{URL: "https://receiver.example.com/hooks"})
	_ = ep.Secret // shown once: hand it to the receiver

	w, _ := webhookout.NewDeliverer(d, webhookout.DelivererConfig{})
	fan, _ := webhookout.NewFanOut(d, webhookout.FanOutConfig{Next: brokerPublisher, Written: w.Notify})
	relay, _ := outbox.NewRelay(d, outbox.RelayConfig{Publisher: fan})
	go w.Run(ctx)
	go relay.Run(ctx)
}
