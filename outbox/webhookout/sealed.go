package webhookout

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/seal"
)

// deliveriesTable is the table of the associated data a delivery's sealed
// payload is bound to, with its tenant and its endpoint and event.
const deliveriesTable = "idem_webhook_deliveries"

// deliveryKey is a delivery's key within its tenant: the endpoint and the
// event, split by a NUL that neither id holds.
func deliveryKey(k driver.WebhookDeliveryKey) string { return k.EndpointID + "\x00" + k.EventID }

// sealDelivery encrypts r's payload, a copy of an outbox event's kept
// while the delivery is retried, when s is set.
func sealDelivery(ctx context.Context, s seal.Sealer, r *driver.WebhookDeliveryRow) error {
	if s == nil {
		return nil
	}
	sealed, err := s.Seal(ctx, deliveriesTable, r.Tenant, deliveryKey(r.WebhookDeliveryKey), r.Payload)
	if err != nil {
		return fmt.Errorf("webhookout: seal delivery of event %s: %w", r.EventID, err)
	}
	r.Payload, r.Sealed = sealed, true
	return nil
}

// openDelivery turns a sealed delivery's payload back into its plaintext,
// in place; a plaintext one is left as it is. Without a Sealer a sealed
// one is idem.ErrNoSealer; a forgotten tenant's wraps seal.ErrForgotten.
func openDelivery(ctx context.Context, s seal.Sealer, r *driver.WebhookDeliveryRow) error {
	if !r.Sealed {
		return nil
	}
	if s == nil {
		return fmt.Errorf("webhookout: delivery of event %s: %w", r.EventID, idem.ErrNoSealer)
	}
	plain, err := s.Open(ctx, deliveriesTable, r.Tenant, deliveryKey(r.WebhookDeliveryKey), r.Payload)
	if err != nil {
		return fmt.Errorf("webhookout: open delivery of event %s: %w", r.EventID, err)
	}
	r.Payload, r.Sealed = plain, false
	return nil
}
