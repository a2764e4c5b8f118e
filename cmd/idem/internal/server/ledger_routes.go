package server

import (
	"context"
	"crypto/sha1"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/ledger"
)

// derivedID names a resource created without an id after the request's
// tenant and Idempotency-Key: the same key always names the same resource.
func derivedID(r *http.Request, kind string) string {
	key, ok := idemhttp.KeyFrom(r.Context())
	if !ok {
		return uuid.Must(uuid.NewV7()).String()
	}
	return derivedUUID(kind, key.Scope, key.Key).String()
}

// derivedUUID is uuid.NewSHA1(idNamespace, kind NUL scope NUL key),
// hashed from a stack buffer when the name fits one: every first arrival
// without an id derives one, and NewSHA1 spends four allocations on the
// name and the hash state.
func derivedUUID(kind, scope, key string) uuid.UUID {
	var buf [512]byte
	n := len(idNamespace) + len(kind) + len(scope) + len(key) + 2
	if n > len(buf) {
		return uuid.NewSHA1(idNamespace, []byte(kind+"\x00"+scope+"\x00"+key))
	}
	b := append(buf[:0], idNamespace[:]...)
	b = append(append(append(append(append(b, kind...), 0), scope...), 0), key...)
	sum := sha1.Sum(b)
	var id uuid.UUID
	copy(id[:], sum[:])
	id[6] = id[6]&0x0f | 5<<4 // version 5: SHA-1
	id[8] = id[8]&0x3f | 0x80 // the RFC 4122 variant
	return id
}

// idNamespace is the UUIDv5 namespace of derived resource ids.
var idNamespace = uuid.MustParse("5f0c6c4e-6f1d-4b8e-9a51-6e3b1c2d7a90")

// readTx runs fn in a read-only transaction, so a page or a transfer with
// its reversals is one consistent view.
func (s *Server) readTx(ctx context.Context, fn func(tx driver.Tx) error) error {
	tx, err := s.d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	return fn(tx)
}

// asOfTx is readTx for reads as of a moment, whose answer is final: a
// moment at or after the account's newest entry is read again in a
// read-write transaction that waits for the account's writers still
// committing, and a moment not yet passed is waited for before any
// transaction begins (see inspect.ReadAsOf).
func (s *Server) asOfTx(ctx context.Context, asOf *time.Time, fn func(tx driver.Tx) error) error {
	return inspect.ReadAsOf(ctx, s.d, s.ledger, asOf, func(ctx context.Context) (driver.TxCloser, error) {
		return s.d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	}, fn)
}

func (s *Server) getAccount(w http.ResponseWriter, r *http.Request) {
	var a ledger.Account
	err := s.readTx(r.Context(), func(tx driver.Tx) (err error) {
		a, err = s.ledger.GetAccount(r.Context(), tx, ledger.AccountQuery{Tenant: tenantFrom(r.Context()), ID: r.PathValue("id")})
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) getBalance(w http.ResponseWriter, r *http.Request) {
	asOf, ok := parseAsOf(w, r)
	if !ok {
		return
	}
	var b ledger.Balance
	err := s.asOfTx(r.Context(), asOf, func(tx driver.Tx) (err error) {
		b, err = s.ledger.Balance(r.Context(), tx, ledger.BalanceQuery{Tenant: tenantFrom(r.Context()), AccountID: r.PathValue("id"), AsOf: asOf})
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// listResponse is the shape of every list: a page and the cursor of the
// next one (null on the last page).
type listResponse[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

func page[T any](data []T, next string) listResponse[T] {
	if data == nil {
		data = []T{}
	}
	resp := listResponse[T]{Data: data}
	if next != "" {
		resp.NextCursor = &next
	}
	return resp
}

func (s *Server) listEntries(w http.ResponseWriter, r *http.Request) {
	asOf, ok := parseAsOf(w, r)
	if !ok {
		return
	}
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	var (
		entries []ledger.Entry
		next    string
	)
	err := s.asOfTx(r.Context(), asOf, func(tx driver.Tx) (err error) {
		entries, next, err = s.ledger.Entries(r.Context(), tx, ledger.EntriesQuery{Tenant: tenantFrom(r.Context()),
			AccountID: r.PathValue("id"), AsOf: asOf, Limit: limit, After: r.URL.Query().Get("after")})
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page(entries, next))
}

func (s *Server) getTransfer(w http.ResponseWriter, r *http.Request) {
	var t ledger.Transfer
	err := s.readTx(r.Context(), func(tx driver.Tx) (err error) {
		t, err = s.ledger.GetTransfer(r.Context(), tx, ledger.TransferQuery{Tenant: tenantFrom(r.Context()), ID: r.PathValue("id")})
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if t.Reversals == nil {
		t.Reversals = []ledger.Transfer{}
	}
	writeJSON(w, http.StatusOK, t)
}

// parseAsOf reads the as_of parameter: nil (now) when absent. Any time,
// the zero time included, is a moment.
func parseAsOf(w http.ResponseWriter, r *http.Request) (*time.Time, bool) {
	v := r.URL.Query().Get("as_of")
	if v == "" {
		return nil, true
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		badRequest(w, "as_of: want an RFC 3339 time such as 2026-11-29T14:02:00Z")
		return nil, false
	}
	return &t, true
}

// maxListLimit bounds every list page.
const maxListLimit = 1000

func parseLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 0, true // the lister's default
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxListLimit {
		badRequest(w, "limit: want an integer from 1 to 1000")
		return 0, false
	}
	return n, true
}
