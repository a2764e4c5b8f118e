package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/ledger"
)

// maxTimeoutSeconds bounds a hold's timeout_seconds: 400 days.
const maxTimeoutSeconds = int64(ledger.MaxTimeout / time.Second)

// holdTimeout reads a transfer's timeout_seconds: absent or null, none;
// else an integer from 1 to 400 days in seconds. The error is the 400's
// detail.
func holdTimeout(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	n, err := integer("timeout_seconds", raw)
	if err == nil && (n < 1 || n > maxTimeoutSeconds) {
		err = fmt.Errorf("timeout_seconds: %d is outside 1..%d", n, maxTimeoutSeconds)
	}
	if err != nil {
		return 0, fmt.Errorf("%w; want whole seconds from 1 to %d (400 days)", err, maxTimeoutSeconds)
	}
	return time.Duration(n) * time.Second, nil
}

// settlementRequest is the body of POST /v1/transfers/{id}/post and
// /void (a void takes no amount).
type settlementRequest struct {
	ID       string          `json:"id"`
	Amount   json.RawMessage `json:"amount"` // absent or null: all that is held
	Metadata json.RawMessage `json:"metadata"`
}

// decodeSettlement returns the decoder of POST /v1/transfers/{id}/post
// (settles post) or /void: a settlement of the path's hold, under the
// request's Idempotency-Key, its id derived from the key unless given.
func (s *Server) decodeSettlement(settles ledger.Settles) func(http.ResponseWriter, *http.Request, []byte) (ledgerWrite, bool) {
	return func(w http.ResponseWriter, r *http.Request, body []byte) (ledgerWrite, bool) {
		var in settlementRequest
		if err := decodeRead(r, body, &in); err != nil {
			invalid(w, r, err.Error())
			return ledgerWrite{}, false
		}
		var amount int64
		if len(in.Amount) > 0 && string(in.Amount) != "null" {
			if settles != ledger.SettlePost {
				invalid(w, r, "amount: a void releases the whole hold and takes no amount")
				return ledgerWrite{}, false
			}
			const want = "want a positive integer number of minor units, at most the held amount, or no amount to post all of it"
			var err error
			if amount, err = integer("amount", in.Amount); err != nil {
				invalid(w, r, err.Error()+"; "+want)
				return ledgerWrite{}, false
			}
			if amount <= 0 {
				invalid(w, r, "amount: "+want)
				return ledgerWrite{}, false
			}
		}
		id := in.ID
		if id == "" {
			id = derivedID(r, string(settles))
		}
		return writeOf(r, ledger.Op{Settlement: &ledger.NewSettlement{
			PendingID: r.PathValue("id"), Settles: settles, ID: id, Amount: amount, Metadata: in.Metadata,
		}}), true
	}
}

// transferEvent is the event a transfer just written emits, and its key:
// a reversal and a settlement are keyed by the transfer they name, so
// that their events never overtake that transfer's.
func transferEvent(t *ledger.Transfer) (typ, key string) {
	switch {
	case t.ReversesID != "":
		return "transfer.reversed", "transfer/" + t.ReversesID
	case t.PendingID != "":
		return "transfer." + string(t.Status), "transfer/" + t.PendingID
	case t.Pending:
		return "transfer.pending", "transfer/" + t.ID
	}
	return "transfer.created", "transfer/" + t.ID
}

// listTransfers answers GET /v1/transfers: the tenant's transfers by id,
// filtered by status and account.
func (s *Server) listTransfers(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	var (
		ts   []ledger.Transfer
		next string
	)
	err := s.readTx(r.Context(), func(tx driver.Tx) (err error) {
		ts, next, err = s.ledger.Transfers(r.Context(), tx, ledger.TransfersQuery{Tenant: tenantFrom(r.Context()),
			AccountID: q.Get("account_id"), Status: ledger.Status(q.Get("status")), Limit: limit, After: q.Get("after")})
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page(ts, next))
}
