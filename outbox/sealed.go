package outbox

import (
	"context"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/sealframe"
	"github.com/idemhq/idem/seal"
)

// outboxTable is the table of the associated data a sealed message is
// bound to, with its tenant and id (package seal).
const outboxTable = "idem_outbox"

// sealRow encrypts r's headers and payload together into its payload,
// bound to the row's tenant and id, when s is set. The ordering key, the
// type and the trace context stay readable: relays and operators route by
// them.
func sealRow(ctx context.Context, s seal.Sealer, r *driver.OutboxRow) error {
	if s == nil {
		return nil
	}
	sealed, err := s.Seal(ctx, outboxTable, r.Tenant, r.ID, sealframe.Pack(r.Headers, r.Payload))
	if err != nil {
		return fmt.Errorf("outbox: seal message %s: %w", r.ID, err)
	}
	r.Payload, r.Headers, r.Sealed = sealed, nil, true
	return nil
}

// OpenRow turns a row read through the driver (its OutboxFetch,
// OutboxGet…) into its plaintext payload and headers, in place, with s:
// what a caller outside this package that reads rows itself does before it
// uses them (webhookout's replay of an event). A plaintext row is left as
// it is; errors are openRow's.
func OpenRow(ctx context.Context, s seal.Sealer, r *driver.OutboxRow) error {
	return openRow(ctx, s, r)
}

// openRow turns a sealed row back into its plaintext headers and payload,
// in place; a plaintext row (written before encryption was turned on) is
// left as it is. A sealed row without a Sealer is idem.ErrNoSealer; one
// whose tenant was forgotten wraps seal.ErrForgotten.
func openRow(ctx context.Context, s seal.Sealer, r *driver.OutboxRow) error {
	if !r.Sealed {
		return nil
	}
	if s == nil {
		return fmt.Errorf("outbox: message %s: %w", r.ID, idem.ErrNoSealer)
	}
	plain, err := s.Open(ctx, outboxTable, r.Tenant, r.ID, r.Payload)
	if err != nil {
		return fmt.Errorf("outbox: open message %s: %w", r.ID, err)
	}
	headers, payload, ok := sealframe.Unpack(plain)
	if !ok {
		return fmt.Errorf("outbox: message %s opened to a malformed record", r.ID)
	}
	r.Payload, r.Headers, r.Sealed = payload, headers, false
	return nil
}
