package idemclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config configures a Client. BaseURL is required.
type Config struct {
	// BaseURL is the service's address with its scheme, such as
	// http://localhost:8080 (a path prefix is kept). Required.
	BaseURL string
	// APIKey is sent as Authorization: Bearer. Default none; at most 4096
	// characters.
	APIKey string
	// Policy is the retry policy (defaults: 5 attempts, 100ms..5s).
	Policy Policy
	// Base sends each attempt. Default http.DefaultTransport.
	Base http.RoundTripper
	// MaxAnswerBytes bounds an answer's body. Default 16 MiB; bound
	// 1 KiB..1 GiB.
	MaxAnswerBytes int64
}

const (
	defaultMaxAnswerBytes = 16 << 20
	maxAPIKeyLength       = 4096
)

func (c Config) withDefaults() Config {
	if c.MaxAnswerBytes == 0 {
		c.MaxAnswerBytes = defaultMaxAnswerBytes
	}
	return c
}

func (c Config) validate() (*url.URL, error) {
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil:
		return nil, badInput("BaseURL %q: %v", c.BaseURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, badInput("BaseURL %q has no http:// or https:// scheme", c.BaseURL)
	case u.Host == "":
		return nil, badInput("BaseURL %q has no host", c.BaseURL)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, badInput("BaseURL %q has a query or fragment", c.BaseURL)
	case len(c.APIKey) > maxAPIKeyLength:
		return nil, badInput("APIKey is over %d characters", maxAPIKeyLength)
	case c.MaxAnswerBytes < 1<<10 || c.MaxAnswerBytes > 1<<30:
		return nil, badInput("MaxAnswerBytes %d is outside 1KiB..1GiB", c.MaxAnswerBytes)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// Client is a typed client for idem's HTTP API (docs/api.md) on a
// Transport. Safe for concurrent use.
type Client struct {
	base   string // scheme, host and path prefix, without a trailing /
	apiKey string
	http   *http.Client
	max    int64
}

// New returns a Client for cfg; a bad config is an error wrapping
// ErrBadInput.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	// The typed calls always send a buffer, so a body that cannot be
	// replayed is a bug of the caller's own Do.
	p := cfg.Policy
	p.RequireReplayableBody = true
	tr, err := NewTransport(cfg.Base, p)
	if err != nil {
		return nil, err
	}
	return &Client{base: u.String(), apiKey: cfg.APIKey, http: &http.Client{Transport: tr}, max: cfg.MaxAnswerBytes}, nil
}

// HTTPClient is the client's http.Client, to call a route this package
// does not name with the same rules.
func (c *Client) HTTPClient() *http.Client { return c.http }

// CallOption sets something of one call.
type CallOption func(*call)

type call struct{ key string }

// WithKey sends key as the call's Idempotency-Key. Pass the key stored
// with your own record before the first attempt: a retry after the caller
// itself crashed then reuses it, and gets the first attempt's answer. A
// call without one gets a new key, kept across that call's retries only.
func WithKey(key string) CallOption { return func(c *call) { c.key = key } }

// Answer says how an answer came: Status is its HTTP status and Replayed
// is true when idem answered with the outcome it stored for the key.
type Answer struct {
	Status   int  `json:"-"`
	Replayed bool `json:"-"`
}

func (a *Answer) answer() *Answer { return a }

// answered is every result type: it embeds an Answer.
type answered interface{ answer() *Answer }

// AccountFlags are an account's balance constraints.
type AccountFlags struct {
	DebitsMustNotExceedCredits bool `json:"debits_must_not_exceed_credits"`
	CreditsMustNotExceedDebits bool `json:"credits_must_not_exceed_debits"`
}

// AccountParams is POST /v1/accounts's body. Without ID, the id is derived
// from the key.
type AccountParams struct {
	ID       string          `json:"id,omitempty"`
	Currency string          `json:"currency"`
	Flags    *AccountFlags   `json:"flags,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Account is an account with its current totals.
type Account struct {
	Answer
	ID            string          `json:"id"`
	Currency      string          `json:"currency"`
	Flags         AccountFlags    `json:"flags"`
	Metadata      json.RawMessage `json:"metadata"`
	DebitsPosted  int64           `json:"debits_posted"`
	CreditsPosted int64           `json:"credits_posted"`
	Balance       int64           `json:"balance"`
	// DebitsPending and CreditsPending are what the account's open holds
	// reserve; Available is Balance - DebitsPending.
	DebitsPending  int64     `json:"debits_pending"`
	CreditsPending int64     `json:"credits_pending"`
	Available      int64     `json:"available"`
	CreatedAt      time.Time `json:"created_at"`
}

// TransferParams is POST /v1/transfers's body, and one transfer of a
// batch. Without ID, the id is derived from the key (and, in a batch, the
// transfer's index).
type TransferParams struct {
	ID              string          `json:"id,omitempty"`
	DebitAccountID  string          `json:"debit_account_id"`
	CreditAccountID string          `json:"credit_account_id"`
	Amount          int64           `json:"amount"`
	Currency        string          `json:"currency"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
	// Pending makes the transfer a hold, settled later by PostPending or
	// VoidPending, or released once TimeoutSeconds (1..34560000; 0: none)
	// have passed.
	Pending        bool  `json:"pending,omitempty"`
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// Transfer is a posted transfer or reversal.
type Transfer struct {
	Answer
	ID              string          `json:"id"`
	DebitAccountID  string          `json:"debit_account_id"`
	CreditAccountID string          `json:"credit_account_id"`
	Amount          int64           `json:"amount"`
	Currency        string          `json:"currency"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	// ReversesID and Reason are a reversal's.
	ReversesID string `json:"reverses_id,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// State is the transfer's status: "pending" (a hold not settled yet),
	// "posted", "voided" or "expired" (docs/api.md, Holds).
	State string `json:"status"`
	// Pending, TimeoutSeconds, ExpiresAt and SettledBy are a hold's;
	// PendingID and Settles ("post", "void", "expire") a settlement's.
	Pending        bool       `json:"pending,omitempty"`
	TimeoutSeconds int64      `json:"timeout_seconds,omitempty"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	SettledBy      string     `json:"settled_by,omitempty"`
	PendingID      string     `json:"pending_id,omitempty"`
	Settles        string     `json:"settles,omitempty"`
	// Reversals is GetTransfer's: the transfer's reversals, oldest first.
	Reversals []Transfer `json:"reversals,omitempty"`
}

// ReversalParams is POST /v1/transfers/{id}/reversals's body. A nil
// Amount reverses all that remains.
type ReversalParams struct {
	ID       string          `json:"id,omitempty"`
	Amount   *int64          `json:"amount,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// SettleParams is the body of POST /v1/transfers/{id}/post and /void. A
// nil Amount posts all that is held; a void takes none.
type SettleParams struct {
	ID       string          `json:"id,omitempty"`
	Amount   *int64          `json:"amount,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// TransfersParams pages a tenant's transfers: Status "pending" lists the
// open holds; AccountID keeps one account's; Limit 0 is the server's
// default (100), at most 1000; After is a previous page's NextCursor.
type TransfersParams struct {
	Status    string
	AccountID string
	Limit     int
	After     string
}

// TransferPage is one page of transfers, by id; NextCursor is "" on the
// last page.
type TransferPage struct {
	Answer
	Data       []Transfer `json:"data"`
	NextCursor string     `json:"next_cursor"`
}

// BatchResult is POST /v1/transfers/batch's answer: one result per
// transfer, in request order.
type BatchResult struct {
	Answer
	Data []BatchItem `json:"data"`
}

// BatchItem is one transfer's result in a batch: Status is "created",
// "existing" (Transfer is the stored one) or "refused" (Error says why).
type BatchItem struct {
	Status   string     `json:"status"`
	Transfer *Transfer  `json:"transfer,omitempty"`
	Error    *ItemError `json:"error,omitempty"`
}

// ItemError is why a batch refused one transfer. It matches its Code with
// errors.Is, as a Problem does.
type ItemError struct {
	Code    string `json:"code"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *ItemError) Error() string { return "idem: " + e.Code + ": " + e.Message }

// Is matches the Code the error carries.
func (e *ItemError) Is(target error) bool {
	c, ok := target.(Code)
	return ok && string(c) == e.Code
}

// Balance is an account's balance as of a moment.
type Balance struct {
	Answer
	AccountID     string    `json:"account_id"`
	AsOf          time.Time `json:"as_of"`
	DebitsPosted  int64     `json:"debits_posted"`
	CreditsPosted int64     `json:"credits_posted"`
	Balance       int64     `json:"balance"`
	// The pending totals and Available as of the same moment.
	DebitsPending  int64 `json:"debits_pending"`
	CreditsPending int64 `json:"credits_pending"`
	Available      int64 `json:"available"`
}

// Entry is one entry of an account, with the account's totals after it.
type Entry struct {
	TransferID    string `json:"transfer_id"`
	AccountID     string `json:"account_id"`
	Sequence      int64  `json:"sequence"`
	Amount        int64  `json:"amount"`
	Direction     string `json:"direction"`
	DebitsPosted  int64  `json:"debits_posted"`
	CreditsPosted int64  `json:"credits_posted"`
	Balance       int64  `json:"balance"`
	// DebitsPending and CreditsPending are the account's pending totals
	// after the entry.
	DebitsPending  int64     `json:"debits_pending"`
	CreditsPending int64     `json:"credits_pending"`
	CreatedAt      time.Time `json:"created_at"`
}

// EntriesParams pages an account's entries. A nil AsOf means now (the
// zero time is a moment like any other); Limit 0 is the server's default
// (100), at most 1000; After is a previous page's NextCursor.
type EntriesParams struct {
	AsOf  *time.Time
	Limit int
	After string
}

// EntryPage is one page of entries, newest first; NextCursor is "" on the
// last page.
type EntryPage struct {
	Answer
	Data       []Entry `json:"data"`
	NextCursor string  `json:"next_cursor"`
}

// Event is one event of the tenant's outbox.
type Event struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	CreatedAt   time.Time       `json:"created_at"`
	Payload     json.RawMessage `json:"payload"`
	PublishedAt *time.Time      `json:"published_at"`
}

// EventsParams pages the events: After is a previous page's NextCursor,
// Limit 0 the server's default (100), at most 1000.
type EventsParams struct {
	After string
	Limit int
}

// EventPage is one page of events, oldest first.
type EventPage struct {
	Answer
	Data       []Event `json:"data"`
	NextCursor string  `json:"next_cursor"`
}

// CreateAccount creates an account (POST /v1/accounts).
func (c *Client) CreateAccount(ctx context.Context, p AccountParams, opts ...CallOption) (*Account, error) {
	var a Account
	return result(&a, c.post(ctx, "/v1/accounts", p, &a, opts))
}

// GetAccount reads an account with its current totals.
func (c *Client) GetAccount(ctx context.Context, id string) (*Account, error) {
	var a Account
	return result(&a, c.get(ctx, "/v1/accounts/"+url.PathEscape(id), nil, &a))
}

// Balance reads an account's balance as of asOf (nil: now). An answer for
// a given moment is final (docs/api.md).
func (c *Client) Balance(ctx context.Context, id string, asOf *time.Time) (*Balance, error) {
	q := url.Values{}
	if asOf != nil {
		q.Set("as_of", asOf.UTC().Format(time.RFC3339Nano))
	}
	var b Balance
	return result(&b, c.get(ctx, "/v1/accounts/"+url.PathEscape(id)+"/balance", q, &b))
}

// Entries reads a page of an account's entries.
func (c *Client) Entries(ctx context.Context, id string, p EntriesParams) (*EntryPage, error) {
	q := url.Values{}
	if p.AsOf != nil {
		q.Set("as_of", p.AsOf.UTC().Format(time.RFC3339Nano))
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	var e EntryPage
	return result(&e, c.get(ctx, "/v1/accounts/"+url.PathEscape(id)+"/entries", q, &e))
}

// CreateTransfer posts a transfer (POST /v1/transfers). A business
// refusal is a *Problem matching its code (ErrInsufficientFunds, …), and
// is stored: its retry is refused the same way, with Replayed set.
func (c *Client) CreateTransfer(ctx context.Context, p TransferParams, opts ...CallOption) (*Transfer, error) {
	var t Transfer
	return result(&t, c.post(ctx, "/v1/transfers", p, &t, opts))
}

// CreateTransfers posts 1 to 1000 transfers in one request (POST
// /v1/transfers/batch), each created, existing or refused on its own.
func (c *Client) CreateTransfers(ctx context.Context, ps []TransferParams, opts ...CallOption) (*BatchResult, error) {
	if len(ps) == 0 || len(ps) > 1000 {
		return nil, badInput("a batch holds 1 to 1000 transfers, not %d", len(ps))
	}
	var r BatchResult
	return result(&r, c.post(ctx, "/v1/transfers/batch", struct {
		Transfers []TransferParams `json:"transfers"`
	}{ps}, &r, opts))
}

// GetTransfer reads a transfer with its reversals.
func (c *Client) GetTransfer(ctx context.Context, id string) (*Transfer, error) {
	var t Transfer
	return result(&t, c.get(ctx, "/v1/transfers/"+url.PathEscape(id), nil, &t))
}

// ReverseTransfer posts a reversal of transfer id (POST
// /v1/transfers/{id}/reversals).
func (c *Client) ReverseTransfer(ctx context.Context, id string, p ReversalParams, opts ...CallOption) (*Transfer, error) {
	var t Transfer
	return result(&t, c.post(ctx, "/v1/transfers/"+url.PathEscape(id)+"/reversals", p, &t, opts))
}

// PostPending posts hold id, all of it or p.Amount, releasing the rest
// (POST /v1/transfers/{id}/post). A hold settles once: a second
// settlement is a *Problem matching ErrPendingAlreadyPosted, …Voided or
// …Expired.
func (c *Client) PostPending(ctx context.Context, id string, p SettleParams, opts ...CallOption) (*Transfer, error) {
	var t Transfer
	return result(&t, c.post(ctx, "/v1/transfers/"+url.PathEscape(id)+"/post", p, &t, opts))
}

// VoidPending releases hold id (POST /v1/transfers/{id}/void); p.Amount
// must be nil.
func (c *Client) VoidPending(ctx context.Context, id string, p SettleParams, opts ...CallOption) (*Transfer, error) {
	if p.Amount != nil {
		return nil, badInput("a void releases the whole hold and takes no amount")
	}
	var t Transfer
	return result(&t, c.post(ctx, "/v1/transfers/"+url.PathEscape(id)+"/void", p, &t, opts))
}

// Transfers reads a page of the tenant's transfers (GET /v1/transfers).
func (c *Client) Transfers(ctx context.Context, p TransfersParams) (*TransferPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": p.Status, "account_id": p.AccountID, "after": p.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var tp TransferPage
	return result(&tp, c.get(ctx, "/v1/transfers", q, &tp))
}

// Events reads a page of the tenant's events, oldest first.
func (c *Client) Events(ctx context.Context, p EventsParams) (*EventPage, error) {
	q := url.Values{}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.After != "" {
		q.Set("after", p.After)
	}
	var e EventPage
	return result(&e, c.get(ctx, "/v1/events", q, &e))
}

// result is v, or nil with err.
func result[T any](v *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (c *Client) post(ctx context.Context, path string, body any, out answered, opts []CallOption) error {
	return c.send(ctx, http.MethodPost, path, body, out, opts)
}

// send sends a write under the call's key. A DELETE, which the Transport
// does not key by itself (HTTP defines it as idempotent, idem stores its
// answer), gets a new key here when the call has none, kept across the
// call's retries.
func (c *Client) send(ctx context.Context, method, path string, body any, out answered, opts []CallOption) error {
	var cl call
	for _, o := range opts {
		o(&cl)
	}
	if cl.key != "" {
		if err := CheckKey(cl.key); err != nil {
			return err
		}
	}
	if cl.key == "" && method == http.MethodDelete {
		k, err := NewKey()
		if err != nil {
			return err
		}
		cl.key = k
	}
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return badInput("%s %s: %v", method, path, err)
		}
	}
	return c.do(ctx, method, path, nil, b, cl.key, out)
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out answered) error {
	return c.do(ctx, http.MethodGet, path, q, nil, "", out)
}

// do sends one call: body is a buffer, so every attempt can send it.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, key string, out answered) error {
	target := c.base + path // path's segments are escaped already
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return badInput("%s %s: %v", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(HeaderKey, key)
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the Transport's errors already name the call
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.max+1))
	if err != nil {
		return fmt.Errorf("idemclient: %s %s: reading the answer: %w", method, path, err)
	}
	if int64(len(b)) > c.max {
		return fmt.Errorf("idemclient: %s %s: answer over %d bytes", method, path, c.max)
	}
	replayed := resp.Header.Get(HeaderReplayed) == "true"
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		p := &Problem{}
		if problemCode(resp.Header, b) != "" {
			_ = json.Unmarshal(b, p)
		}
		p.Status, p.Replayed, p.Header, p.Body = resp.StatusCode, replayed, resp.Header, b
		if p.Title == "" {
			p.Title = http.StatusText(resp.StatusCode)
		}
		return p
	}
	// A 204 (DELETE) has no body to read.
	if resp.StatusCode != http.StatusNoContent || len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("idemclient: %s %s: answer %d is not the JSON expected: %w", method, path, resp.StatusCode, err)
		}
	}

	a := out.answer()
	a.Status, a.Replayed = resp.StatusCode, replayed
	return nil
}
