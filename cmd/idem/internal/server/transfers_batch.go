package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox"
)

// maxLedgerBatch bounds the ops of one ledger call: the transfers of one
// POST /v1/transfers/batch, and the requests of one group-commit batch
// (--batch-max).
const maxLedgerBatch = 1000

// batchRequest is POST /v1/transfers/batch's body.
type batchRequest struct {
	Transfers []json.RawMessage `json:"transfers"`
}

// batchResult is one transfer's result in POST /v1/transfers/batch's
// answer, at its index in the request.
type batchResult struct {
	// Status is created, existing (the id was already taken by an
	// identical transfer: nothing written) or refused.
	Status   string           `json:"status"`
	Transfer *ledger.Transfer `json:"transfer,omitempty"`
	Error    *ledger.Error    `json:"error,omitempty"`
}

// batchResponse is POST /v1/transfers/batch's answer.
type batchResponse struct {
	Data []batchResult `json:"data"`
}

// postTransferBatch answers POST /v1/transfers/batch: many transfers, each
// on its own (ledger.PostEach). A refused transfer does not stop the
// others; the answer, 200 with one result per transfer in request order,
// is stored under the request's Idempotency-Key like any other. A
// transfer without an id gets one derived from the key and its index, so
// a retry after the key's retention still cannot post it twice.
func (s *Server) postTransferBatch(w http.ResponseWriter, r *http.Request) {
	var in batchRequest
	if err := decode(r, &in); err != nil {
		invalid(w, r, err.Error())
		return
	}
	switch n := len(in.Transfers); {
	case n == 0:
		invalid(w, r, "transfers: want an array of 1 to 1000 transfers")
		return
	case n > maxLedgerBatch:
		invalid(w, r, fmt.Sprintf("transfers: %d transfers, more than %d", n, maxLedgerBatch))
		return
	}
	ts := make([]ledger.NewTransfer, len(in.Transfers))
	for i, raw := range in.Transfers {
		t, err := decodeBatchTransfer(raw)
		if err != nil {
			invalid(w, r, fmt.Sprintf("transfers[%d]: %v", i, err))
			return
		}
		if t.ID == "" {
			t.ID = derivedID(r, fmt.Sprintf("transfer-batch/%d", i))
		}
		ts[i] = t
	}
	ctx, tx, tenant := r.Context(), txOf(r.Context()), tenantFrom(r.Context())
	res, err := s.ledger.PostEach(ctx, tx, tenant, ts...)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]batchResult, len(res))
	var events []outbox.Message
	for i, tr := range res {
		switch {
		case tr.Err != nil:
			out[i] = batchResult{Status: "refused", Error: tr.Err}
		case tr.Transfer.Existing:
			out[i] = batchResult{Status: "existing", Transfer: &tr.Transfer}
		default:
			out[i] = batchResult{Status: "created", Transfer: &tr.Transfer}
			typ, key := transferEvent(&tr.Transfer)
			m, err := newEvent(tenant, typ, key, tr.Transfer)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			events = append(events, m)
		}
	}
	if len(events) > 0 {
		if err := s.outbox.Enqueue(ctx, tx, events...); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, batchResponse{Data: out})
}

// decodeBatchTransfer reads one transfer of a batch as strictly as
// POST /v1/transfers reads its body (the whole body's members were
// checked already). The error names the member at fault when there is one.
func decodeBatchTransfer(raw json.RawMessage) (ledger.NewTransfer, error) {
	if b := bytes.TrimLeft(raw, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return ledger.NewTransfer{}, errors.New("want a JSON object")
	}
	var in transferRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return ledger.NewTransfer{}, err
	}
	return in.newTransfer()
}
