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
	// WebhookDeliveryInsert writes the deliveries that do not exist yet
	// (by endpoint and event) and returns how many it wrote.
	WebhookDeliveryInsert(ctx context.Context, tx Tx, p *WebhookDeliveryInsertParams) (int, error)
	// WebhookDeliveryStep is one turn of a deliverer, in tx: it records
	// the outcomes of Finish, then the endpoints' health of Health, gives
	// back the leases of Release, then claims by Claim (each part skipped
	// when empty or nil). Each part is
	// one statement on Postgres, and the three travel in one round trip.
	WebhookDeliveryStep(ctx context.Context, tx Tx, p *WebhookDeliveryStepParams) (*WebhookDeliveryStepResult, error)
	// WebhookDeliveryStepCommit is WebhookDeliveryStep, then tx's commit:
	// on Postgres in the same round trip when tx is the driver's own
	// (when a statement fails, COMMIT does not run and tx stays open for
	// its Rollback).
	WebhookDeliveryStepCommit(ctx context.Context, tx TxCloser, p *WebhookDeliveryStepParams) (*WebhookDeliveryStepResult, error)
	// WebhookDeliveryGet reads one delivery; ErrNotFound when none.
	WebhookDeliveryGet(ctx context.Context, tx Tx, p *WebhookDeliveryGetParams) (*WebhookDeliveryRow, error)
	// WebhookDeliveryReplay makes at most Limit of an endpoint's finished
	// deliveries pending again, due at Now with their attempts reset: the
	// one of EventID (also when it is pending and no worker holds it), or
	// else those of events created at or after Since. It returns how many.
	WebhookDeliveryReplay(ctx context.Context, tx Tx, p *WebhookDeliveryReplayParams) (int, error)
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

type WebhookDeliveryInsertParams struct {
	Rows []WebhookDeliveryRow
}

type WebhookDeliveryStepParams struct {
	Owner string
	Now   time.Time
	// Finish are attempts' outcomes. Each is recorded only on a delivery
	// Owner still leases (one whose lease passed to another worker, or
	// whose endpoint was deleted, is left out), with its line in the log
	// of attempts (attempt number Attempts, at Now).
	Finish []WebhookDeliveryFinishRow
	// Health are endpoints' outcomes, one row per endpoint: OK clears
	// failing_since, a failure sets it to Now unless it is set.
	Health []WebhookEndpointHealthRow
	// Claim, when set, leases due deliveries to Owner.
	Claim *WebhookDeliveryClaim
	// Release are leases Owner gives back unused: those deliveries are
	// due at Now again. Run after Finish, before Claim.
	Release []WebhookDeliveryKey
}

// WebhookDeliveryFinishRow is one delivery's state after an attempt, and
// the attempt.
type WebhookDeliveryFinishRow struct {
	Key        WebhookDeliveryKey
	Tenant     string
	State      string
	Attempts   int
	NextAt     time.Time
	LastStatus int
	LastError  string
	LatencyMS  int64
	Response   string // the answer's first bytes
}

// WebhookEndpointHealthRow is an endpoint's outcome in a step.
type WebhookEndpointHealthRow struct {
	ID string
	OK bool
}

// WebhookDeliveryClaim leases at most Limit pending deliveries due at Now
// of enabled endpoints, the earliest first, and of each endpoint at most
// PerEndpoint less its attempts in InFlight (an endpoint at its bound is
// left out of the read, so that its backlog does not fill it): next_at
// moves to Until, so no other worker finds them due before then. At most
// Scan due rows are read; Postgres skips those other transactions lock,
// so that concurrent workers claim different rows (SQLite's writer is
// alone).
type WebhookDeliveryClaim struct {
	Until       time.Time
	Limit       int
	Scan        int
	PerEndpoint int
	InFlight    map[string]int // endpoint id → the worker's attempts in flight
}

// WebhookDeliveryStepResult is what a step did.
type WebhookDeliveryStepResult struct {
	// Recorded are the keys of Finish recorded.
	Recorded []WebhookDeliveryKey
	// FailingSince is, for each endpoint of Health that still exists,
	// failing_since after the change (zero when healthy).
	FailingSince map[string]time.Time
	// Claimed are the deliveries claimed, each with its endpoint as it is
	// now.
	Claimed []WebhookClaimedRow
}

// WebhookClaimedRow is a claimed delivery and its endpoint.
type WebhookClaimedRow struct {
	Delivery WebhookDeliveryRow
	Endpoint WebhookEndpointRow
}

// Full are the endpoints of InFlight at PerEndpoint or above: a claim
// reads none of their deliveries.
func (c *WebhookDeliveryClaim) Full() []string {
	out := []string{}
	for id, n := range c.InFlight {
		if n >= c.PerEndpoint {
			out = append(out, id)
		}
	}
	return out
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
