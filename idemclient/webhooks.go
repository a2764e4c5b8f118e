package idemclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// WebhookEndpointParams is POST /v1/webhook-endpoints's body: a receiver
// of the tenant's events (docs/webhooks-out.md).
type WebhookEndpointParams struct {
	URL string `json:"url"`
	// EventTypes are exact type names or a prefix and ".*"; empty: all.
	EventTypes  []string `json:"event_types,omitempty"`
	Description string   `json:"description,omitempty"`
	// Enabled defaults to true.
	Enabled   *bool `json:"enabled,omitempty"`
	RateLimit int   `json:"rate_limit,omitempty"`
	// Secret, whsec_…, defaults to a generated one.
	Secret string `json:"secret,omitempty"`
}

// WebhookEndpointPatch is PATCH /v1/webhook-endpoints/{id}'s body: nil
// fields are left as they are.
type WebhookEndpointPatch struct {
	URL         *string   `json:"url,omitempty"`
	EventTypes  *[]string `json:"event_types,omitempty"`
	Description *string   `json:"description,omitempty"`
	Enabled     *bool     `json:"enabled,omitempty"`
	RateLimit   *int      `json:"rate_limit,omitempty"`
}

// WebhookEndpoint is a receiver of the tenant's events. Secret is set in
// the answers of CreateWebhookEndpoint and RotateWebhookEndpointSecret
// only.
type WebhookEndpoint struct {
	Answer
	ID             string     `json:"id"`
	URL            string     `json:"url"`
	Description    string     `json:"description"`
	EventTypes     []string   `json:"event_types"`
	Enabled        bool       `json:"enabled"`
	RateLimit      int        `json:"rate_limit"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	FailingSince   *time.Time `json:"failing_since"`
	DisabledAt     *time.Time `json:"disabled_at"`
	DisabledReason string     `json:"disabled_reason"`
	Secret         string     `json:"secret"`
	SecretsActive  int        `json:"secrets_active"`
}

// WebhookEndpointPage is one page of endpoints, in id order.
type WebhookEndpointPage struct {
	Answer
	Data       []WebhookEndpoint `json:"data"`
	NextCursor string            `json:"next_cursor"`
}

// WebhookAttempt is one attempt to deliver an event to an endpoint.
type WebhookAttempt struct {
	ID        string    `json:"id"`
	EventID   string    `json:"event_id"`
	Attempt   int       `json:"attempt"`
	At        time.Time `json:"at"`
	Status    int       `json:"status"` // 0: no answer came
	LatencyMS int64     `json:"latency_ms"`
	Response  string    `json:"response"`
	Error     string    `json:"error"`
}

// WebhookAttemptsParams pages an endpoint's attempts, newest first; with
// EventID, one event's.
type WebhookAttemptsParams struct {
	EventID string
	After   string
	Limit   int
}

// WebhookAttemptPage is one page of attempts.
type WebhookAttemptPage struct {
	Answer
	Data       []WebhookAttempt `json:"data"`
	NextCursor string           `json:"next_cursor"`
}

// WebhookReplayParams selects what a replay sends again: one of the two.
type WebhookReplayParams struct {
	Since   *time.Time `json:"since,omitempty"`
	EventID string     `json:"event_id,omitempty"`
}

// WebhookReplayResult says how many deliveries a replay made pending.
type WebhookReplayResult struct {
	Answer
	Deliveries int `json:"deliveries"`
}

// PageParams pages a list: After is a previous page's NextCursor, Limit
// 0 the server's default (100), at most 1000.
type PageParams struct {
	After string
	Limit int
}

func pageQuery(after string, limit int) url.Values {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		q.Set("after", after)
	}
	return q
}

func endpointPath(id string) string { return "/v1/webhook-endpoints/" + url.PathEscape(id) }

// CreateWebhookEndpoint registers a receiver of the tenant's events. Keep
// the answer's Secret: no later read shows it (a retry with the same key
// answers it again).
func (c *Client) CreateWebhookEndpoint(ctx context.Context, p WebhookEndpointParams, opts ...CallOption) (*WebhookEndpoint, error) {
	var e WebhookEndpoint
	return result(&e, c.post(ctx, "/v1/webhook-endpoints", p, &e, opts))
}

// GetWebhookEndpoint reads one endpoint, without its secret.
func (c *Client) GetWebhookEndpoint(ctx context.Context, id string) (*WebhookEndpoint, error) {
	var e WebhookEndpoint
	return result(&e, c.get(ctx, endpointPath(id), nil, &e))
}

// WebhookEndpoints reads a page of the tenant's endpoints.
func (c *Client) WebhookEndpoints(ctx context.Context, p PageParams) (*WebhookEndpointPage, error) {
	var e WebhookEndpointPage
	return result(&e, c.get(ctx, "/v1/webhook-endpoints", pageQuery(p.After, p.Limit), &e))
}

// UpdateWebhookEndpoint changes an endpoint (PATCH).
func (c *Client) UpdateWebhookEndpoint(ctx context.Context, id string, p WebhookEndpointPatch, opts ...CallOption) (*WebhookEndpoint, error) {
	var e WebhookEndpoint
	return result(&e, c.send(ctx, http.MethodPatch, endpointPath(id), p, &e, opts))
}

// DeleteWebhookEndpoint deletes an endpoint with its pending deliveries
// and attempts. It is sent under an Idempotency-Key like every write, so a
// retry answers as the first attempt did.
func (c *Client) DeleteWebhookEndpoint(ctx context.Context, id string, opts ...CallOption) error {
	var a Answer
	return c.send(ctx, http.MethodDelete, endpointPath(id), nil, &a, opts)
}

// RotateWebhookEndpointSecret gives an endpoint a new secret (secret, or
// a generated one when ""); the previous one keeps signing beside it for
// 24 hours. The answer holds the new Secret.
func (c *Client) RotateWebhookEndpointSecret(ctx context.Context, id, secret string, opts ...CallOption) (*WebhookEndpoint, error) {
	var e WebhookEndpoint
	return result(&e, c.post(ctx, endpointPath(id)+"/rotate-secret", struct {
		Secret string `json:"secret,omitempty"`
	}{secret}, &e, opts))
}

// WebhookAttempts reads a page of an endpoint's attempts, newest first.
func (c *Client) WebhookAttempts(ctx context.Context, id string, p WebhookAttemptsParams) (*WebhookAttemptPage, error) {
	q := pageQuery(p.After, p.Limit)
	if p.EventID != "" {
		q.Set("event_id", p.EventID)
	}
	var a WebhookAttemptPage
	return result(&a, c.get(ctx, endpointPath(id)+"/attempts", q, &a))
}

// ReplayWebhookEndpoint sends deliveries of an endpoint again, each with
// its event's id as webhook-id, as the first time.
func (c *Client) ReplayWebhookEndpoint(ctx context.Context, id string, p WebhookReplayParams, opts ...CallOption) (*WebhookReplayResult, error) {
	var r WebhookReplayResult
	return result(&r, c.post(ctx, endpointPath(id)+"/replay", p, &r, opts))
}
