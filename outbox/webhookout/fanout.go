package webhookout

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/seal"
)

// FanOutConfig configures NewFanOut. The zero value is usable.
type FanOutConfig struct {
	// Next, when set, receives every message after its deliveries are
	// written: the relay's broker publisher, so that one relay feeds both.
	Next outbox.Publisher
	// Written is called after a publish wrote deliveries (a Deliverer's
	// Notify), so that they go out without waiting for its poll.
	Written func()
	// DBTimeout bounds the fan-out's transaction. Default 10s; bound
	// 10ms..1m.
	DBTimeout time.Duration
	// Clock returns the current time: a new delivery is due at once.
	// Default time.Now.
	Clock func() time.Time
	// Sealer seals each delivery's copy of its event's payload (the relay
	// opened the event to publish it). Default nil: stored as it is.
	Sealer seal.Sealer
}

// FanOut is the outbox.Publisher that turns each event into one delivery
// per enabled endpoint of its tenant whose filter matches. The relay hands
// it an event at least once; the deliveries' primary key (endpoint, event)
// keeps the second hand-over from writing a second delivery. An endpoint
// receives the events relayed after it was registered.
type FanOut struct {
	d   driver.Driver
	cfg FanOutConfig
}

// NewFanOut returns the fan-out of d's outbox to the endpoints on d.
func NewFanOut(d driver.Driver, cfg FanOutConfig) (*FanOut, error) {
	if cfg.DBTimeout == 0 {
		cfg.DBTimeout = 10 * time.Second
	}
	if cfg.DBTimeout < 10*time.Millisecond || cfg.DBTimeout > time.Minute {
		return nil, fmt.Errorf("webhookout: DBTimeout %s is outside 10ms..1m", cfg.DBTimeout)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &FanOut{d: d, cfg: cfg}, nil
}

// Publish writes the deliveries of msgs, then hands msgs to Next. A
// database fault fails every message as a broker outage: the relay keeps
// them unsent and tries again.
func (f *FanOut) Publish(ctx context.Context, msgs []outbox.Message) []error {
	n, err := f.fanOut(ctx, msgs)
	if err != nil {
		return outbox.Errs(len(msgs), outbox.BrokerUnavailable(fmt.Errorf("webhookout: fan-out: %w", err)))
	}
	if n > 0 && f.cfg.Written != nil {
		f.cfg.Written()
	}
	if f.cfg.Next != nil {
		return f.cfg.Next.Publish(ctx, msgs)
	}
	return make([]error, len(msgs))
}

// fanOut reads the endpoints of msgs' tenants in one statement, outside
// any transaction (one round trip), and only when some match writes their
// deliveries in a transaction: the relay's batches cost a write only when
// there is something to deliver.
func (f *FanOut) fanOut(ctx context.Context, msgs []outbox.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.DBTimeout)
	defer cancel()
	seen := map[string]bool{}
	var tenants []string
	for _, m := range msgs {
		if !seen[m.Tenant] {
			seen[m.Tenant] = true
			tenants = append(tenants, m.Tenant)
		}
	}
	eps, err := f.d.WebhookEndpointFind(ctx, f.d.Reader(), &driver.WebhookEndpointFindParams{Tenants: tenants})
	if err != nil || len(eps) == 0 {
		return 0, err
	}
	byTenant := map[string][]endpointFilter{}
	for _, e := range eps {
		var types []string
		if err := json.Unmarshal(e.EventTypes, &types); err != nil {
			return 0, fmt.Errorf("endpoint %s: stored event types: %w", e.ID, err)
		}
		byTenant[e.Tenant] = append(byTenant[e.Tenant], endpointFilter{id: e.ID, types: types})
	}
	now := f.cfg.Clock().UTC()
	var rows []driver.WebhookDeliveryRow
	for _, m := range msgs {
		for _, e := range byTenant[m.Tenant] {
			if Matches(e.types, m.Type) {
				row := driver.WebhookDeliveryRow{
					WebhookDeliveryKey: driver.WebhookDeliveryKey{EndpointID: e.id, EventID: m.ID},
					Tenant:             m.Tenant, Type: m.Type, Payload: m.Payload, EventCreatedAt: m.CreatedAt, NextAt: now,
				}
				if err := sealDelivery(ctx, f.cfg.Sealer, &row); err != nil {
					return 0, err
				}
				rows = append(rows, row)
			}
		}
	}
	if len(rows) == 0 {
		return 0, nil
	}
	tx, err := f.d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	n, err := f.d.WebhookDeliveryInsert(ctx, tx, &driver.WebhookDeliveryInsertParams{Rows: rows})
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

type endpointFilter struct {
	id    string
	types []string
}

// Close closes Next.
func (f *FanOut) Close() error {
	if f.cfg.Next != nil {
		return f.cfg.Next.Close()
	}
	return nil
}

// describer is what a publisher may say of where a message goes, for the
// relay's spans (outbox's interface of the same name).
type describer interface {
	MessagingSystem() string
	Destination(outbox.Message) string
}

// MessagingSystem is Next's when it names one, else "webhook".
func (f *FanOut) MessagingSystem() string {
	if d, ok := f.cfg.Next.(describer); ok {
		return d.MessagingSystem()
	}
	return "webhook"
}

// Destination is Next's when it names one, else the tenant's endpoints.
func (f *FanOut) Destination(m outbox.Message) string {
	if d, ok := f.cfg.Next.(describer); ok {
		return d.Destination(m)
	}
	return "webhook-endpoints/" + m.Tenant
}

var _ outbox.Publisher = (*FanOut)(nil)
