package driver

import (
	"context"
	"time"
)

// WebhookOutDriver stores the webhooks a tenant sends to its own endpoints
// (package outbox/webhookout): the endpoints, one delivery per (event,
// endpoint), and the log of attempts.
type WebhookOutDriver interface {
	// WebhookEndpointInsert writes a new endpoint.
	WebhookEndpointInsert(ctx context.Context, tx Tx, p *WebhookEndpointInsertParams) error
	// WebhookEndpointGet reads one of Tenant's endpoints, ErrNotFound when
	// it has none of that id. With Lock, Postgres locks the row until the
	// transaction ends (SQLite's writer is alone already).
	WebhookEndpointGet(ctx context.Context, tx Tx, p *WebhookEndpointGetParams) (*WebhookEndpointRow, error)
	// WebhookEndpointList returns at most Limit of Tenant's endpoints with
	// an id above AfterID, in id order.
	WebhookEndpointList(ctx context.Context, tx Tx, p *WebhookEndpointListParams) ([]WebhookEndpointRow, error)
	// WebhookEndpointFind returns the enabled endpoints of Tenants, or,
	// when IDs is set, the endpoints of those ids whatever their state.
	WebhookEndpointFind(ctx context.Context, tx Tx, p *WebhookEndpointFindParams) ([]WebhookEndpointRow, error)
	// WebhookEndpointUpdate writes every field of Row but its id, tenant
	// and creation time over the stored endpoint; ErrNotFound when it is
	// gone.
	WebhookEndpointUpdate(ctx context.Context, tx Tx, p *WebhookEndpointUpdateParams) error
	// WebhookEndpointDelete deletes one of Tenant's endpoints with its
	// deliveries and attempts; ErrNotFound when it has none of that id.
	WebhookEndpointDelete(ctx context.Context, tx Tx, p *WebhookEndpointDeleteParams) error
	// WebhookEndpointHealth records a delivery's outcome on its endpoint:
	// OK clears failing_since, a failure sets it to Now unless it is set.
	// It returns failing_since after the change (zero when healthy), and
	// ErrNotFound when the endpoint is gone.
	WebhookEndpointHealth(ctx context.Context, tx Tx, p *WebhookEndpointHealthParams) (time.Time, error)
	// WebhookDeliveryInsert writes the deliveries that do not exist yet
	// (by endpoint and event) and returns how many it wrote.
	WebhookDeliveryInsert(ctx context.Context, tx Tx, p *WebhookDeliveryInsertParams) (int, error)
	// WebhookDeliveryDue returns at most Limit pending deliveries due at
	// Now of enabled endpoints not in Exclude, the earliest first. Postgres
	// locks them until the transaction ends and skips the rows other
	// transactions hold, so that concurrent workers read different rows.
	WebhookDeliveryDue(ctx context.Context, tx Tx, p *WebhookDeliveryDueParams) ([]WebhookDeliveryRow, error)
	// WebhookDeliveryClaim leases the deliveries of Keys to Owner: next_at
	// moves to Until, so no other worker finds them due before then.
	WebhookDeliveryClaim(ctx context.Context, tx Tx, p *WebhookDeliveryClaimParams) error
	// WebhookDeliveryFinish records attempts' outcomes on the deliveries
	// Owner still leases, in one statement, and returns the keys of those
	// it recorded: one whose lease passed to another worker, or whose
	// endpoint was deleted, is left out.
	WebhookDeliveryFinish(ctx context.Context, tx Tx, p *WebhookDeliveryFinishParams) ([]WebhookDeliveryKey, error)
	// WebhookDeliveryGet reads one delivery; ErrNotFound when none.
	WebhookDeliveryGet(ctx context.Context, tx Tx, p *WebhookDeliveryGetParams) (*WebhookDeliveryRow, error)
	// WebhookDeliveryReplay makes at most Limit of an endpoint's finished
	// deliveries pending again, due at Now with their attempts reset: the
	// one of EventID (also when it is pending and no worker holds it), or
	// else those of events created at or after Since. It returns how many.
	WebhookDeliveryReplay(ctx context.Context, tx Tx, p *WebhookDeliveryReplayParams) (int, error)
	// WebhookAttemptInsert appends attempts to the log, in one statement.
	WebhookAttemptInsert(ctx context.Context, tx Tx, p *WebhookAttemptInsertParams) error
	// WebhookAttemptList returns at most Limit attempts of one of Tenant's
	// endpoints (of one event when EventID is set), newest first, with ids
	// below BeforeID when it is not 0.
	WebhookAttemptList(ctx context.Context, tx Tx, p *WebhookAttemptListParams) ([]WebhookAttemptRow, error)
	// WebhookDeleteOld deletes at most Limit attempts made before Before
	// and at most Limit finished deliveries last changed before Before,
	// and returns the larger of the two counts.
	WebhookDeleteOld(ctx context.Context, tx Tx, p *WebhookDeleteOldParams) (int, error)
	// WebhookStats counts the pending deliveries for metrics.
	WebhookStats(ctx context.Context, tx Tx) (*WebhookStats, error)
}

// WebhookEndpointRow is an endpoint as stored. EventTypes and Secrets are
// JSON the business package encodes; the driver stores them as they are.
type WebhookEndpointRow struct {
	ID             string
	Tenant         string
	URL            string
	Description    string
	EventTypes     []byte
	Enabled        bool
	Secrets        []byte
	RateLimit      int // deliveries a second; 0: unbounded
	CreatedAt      time.Time
	UpdatedAt      time.Time
	FailingSince   time.Time // zero while healthy
	DisabledAt     time.Time // zero unless disabled by a failure
	DisabledReason string
}

// Delivery states.
const (
	WebhookPending   = "pending"
	WebhookDelivered = "delivered"
	WebhookFailed    = "failed"
)

// WebhookDeliveryKey names a delivery.
type WebhookDeliveryKey struct {
	EndpointID string
	EventID    string
}

// WebhookDeliveryRow is one event's delivery to one endpoint.
type WebhookDeliveryRow struct {
	WebhookDeliveryKey
	Tenant         string
	Type           string
	Payload        []byte
	Sealed         bool // Payload is a ciphertext (package seal)
	EventCreatedAt time.Time
	State          string
	Attempts       int
	NextAt         time.Time
	Owner          string
	LastStatus     int
	LastError      string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// WebhookAttemptRow is one attempt of a delivery.
type WebhookAttemptRow struct {
	ID         int64
	Tenant     string
	EndpointID string
	EventID    string
	Attempt    int
	At         time.Time
	Status     int // the HTTP status; 0 when no answer came
	LatencyMS  int64
	Response   string // the answer's first bytes
	Error      string
}

type WebhookEndpointInsertParams struct {
	Row WebhookEndpointRow
}

type WebhookEndpointGetParams struct {
	Tenant string
	ID     string
	Lock   bool
}

type WebhookEndpointListParams struct {
	Tenant  string
	AfterID string
	Limit   int
}

type WebhookEndpointFindParams struct {
	Tenants []string
	IDs     []string
}

type WebhookEndpointUpdateParams struct {
	Row WebhookEndpointRow
}

type WebhookEndpointDeleteParams struct {
	Tenant string
	ID     string
}

type WebhookEndpointHealthParams struct {
	ID  string
	OK  bool
	Now time.Time
}

type WebhookDeliveryInsertParams struct {
	Rows []WebhookDeliveryRow
}

type WebhookDeliveryDueParams struct {
	Now     time.Time
	Exclude []string // endpoint ids
	Limit   int
}

type WebhookDeliveryClaimParams struct {
	Keys  []WebhookDeliveryKey
	Owner string
	Until time.Time
}

type WebhookDeliveryFinishParams struct {
	Owner string
	Now   time.Time
	Rows  []WebhookDeliveryFinishRow
}

// WebhookDeliveryFinishRow is one delivery's state after an attempt.
type WebhookDeliveryFinishRow struct {
	Key        WebhookDeliveryKey
	State      string
	Attempts   int
	NextAt     time.Time
	LastStatus int
	LastError  string
}

type WebhookDeliveryGetParams struct {
	Key WebhookDeliveryKey
}

type WebhookDeliveryReplayParams struct {
	Tenant     string
	EndpointID string
	EventID    string
	Since      time.Time
	Now        time.Time
	Limit      int
}

type WebhookAttemptInsertParams struct {
	Rows []WebhookAttemptRow
}

type WebhookAttemptListParams struct {
	Tenant     string
	EndpointID string
	EventID    string
	BeforeID   int64
	Limit      int
}

type WebhookDeleteOldParams struct {
	Before time.Time
	Limit  int
}

// WebhookStats is the deliveries' backlog at one moment.
type WebhookStats struct {
	Pending       int64     // pending deliveries of enabled endpoints
	OldestPending time.Time // event_created_at of the oldest; zero when none
	Failing       int64     // enabled endpoints failing now
	Disabled      int64     // endpoints disabled by failures
}
