package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/problem"
	"github.com/idemhq/idem/ledger"
	"github.com/idemhq/idem/outbox"
)

// The ledger's writes — POST /v1/accounts, /v1/transfers,
// /v1/transfers/{id}/reversals, /post and /void — are decoded into one write each,
// outside any transaction, and applied by applyWrites: with group commit
// (the default) many requests' ops at once, in the one transaction of a
// keeper batch; without it one op, in the request's own transaction. Both
// paths answer with the same bytes, because both are applyWrites.

// ledgerWrite is one request of the ledger's writes: its key and its op.
type ledgerWrite struct {
	key idem.Key
	op  ledger.Op
	// trace is the request's span: its events continue the request's
	// trace, not the batch's.
	trace trace.SpanContext
}

// writeOf is the write of r's op, under r's Idempotency-Key.
func writeOf(r *http.Request, op ledger.Op) ledgerWrite {
	key, _ := idemhttp.KeyFrom(r.Context())
	op.Tenant = tenantFrom(r.Context())
	return ledgerWrite{key: key, op: op, trace: trace.SpanContextFromContext(r.Context())}
}

// decodeAccount reads POST /v1/accounts. A refusal is answered as invalid
// (400, not stored) and reported false.
func (s *Server) decodeAccount(w http.ResponseWriter, r *http.Request, body []byte) (ledgerWrite, bool) {
	var in ledger.NewAccount
	if err := decodeRead(r, body, &in); err != nil {
		invalid(w, r, err.Error())
		return ledgerWrite{}, false
	}
	if in.ID == "" {
		in.ID = derivedID(r, "account")
	}
	return writeOf(r, ledger.Op{Account: &in}), true
}

// transferRequest is POST /v1/transfers's body.
type transferRequest struct {
	ID              string          `json:"id"`
	DebitAccountID  string          `json:"debit_account_id"`
	CreditAccountID string          `json:"credit_account_id"`
	Amount          json.RawMessage `json:"amount"` // integer reads it: a JSON number, never a string
	Currency        string          `json:"currency"`
	Metadata        json.RawMessage `json:"metadata"`
	Pending         bool            `json:"pending"`
	TimeoutSeconds  json.RawMessage `json:"timeout_seconds"` // absent or null: none
}

// newTransfer checks what the ledger cannot: that amount and
// timeout_seconds are JSON integers, and the timeout within its bounds.
// The error is the 400's detail.
func (in *transferRequest) newTransfer() (ledger.NewTransfer, error) {
	amount, err := integer("amount", in.Amount)
	if err != nil {
		return ledger.NewTransfer{}, fmt.Errorf("%w; want a positive integer number of minor units", err)
	}
	timeout, err := holdTimeout(in.TimeoutSeconds)
	if err != nil {
		return ledger.NewTransfer{}, err
	}
	return ledger.NewTransfer{ID: in.ID, DebitAccountID: in.DebitAccountID, CreditAccountID: in.CreditAccountID,
		Amount: amount, Currency: in.Currency, Metadata: in.Metadata, Pending: in.Pending, Timeout: timeout}, nil
}

func (s *Server) decodeTransfer(w http.ResponseWriter, r *http.Request, body []byte) (ledgerWrite, bool) {
	var in transferRequest
	if err := decodeRead(r, body, &in); err != nil {
		invalid(w, r, err.Error())
		return ledgerWrite{}, false
	}
	t, err := in.newTransfer()
	if err != nil {
		invalid(w, r, err.Error())
		return ledgerWrite{}, false
	}
	if t.ID == "" {
		// Derived from (tenant, Idempotency-Key): a retry that arrives after
		// the key's retention still finds this transfer instead of making a
		// second one.
		t.ID = derivedID(r, "transfer")
	}
	return writeOf(r, ledger.Op{Transfer: &t}), true
}

// reversalRequest is POST /v1/transfers/{id}/reversals's body.
type reversalRequest struct {
	ID       string          `json:"id"`
	Amount   json.RawMessage `json:"amount"` // absent or null: all that remains
	Reason   string          `json:"reason"`
	Metadata json.RawMessage `json:"metadata"`
}

func (s *Server) decodeReversal(w http.ResponseWriter, r *http.Request, body []byte) (ledgerWrite, bool) {
	var in reversalRequest
	if err := decodeRead(r, body, &in); err != nil {
		invalid(w, r, err.Error())
		return ledgerWrite{}, false
	}
	var amount int64
	if len(in.Amount) > 0 && string(in.Amount) != "null" {
		const want = "want a positive integer number of minor units, or no amount to reverse all that remains"
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
		id = derivedID(r, "reversal")
	}
	return writeOf(r, ledger.Op{Reversal: &ledger.NewReversal{
		TransferID: r.PathValue("id"), ID: id, Amount: amount, Reason: in.Reason, Metadata: in.Metadata,
	}}), true
}

// applyWrites applies the writes' ops in tx, in order, and answers each: 201 with the
// resource, or the ledger's refusal. A business refusal (422, or 404 for a
// reversal of a missing transfer) is an outcome, stored like a success; a
// refusal of the request's input (400) is an *idemhttp.ResponseError, sent
// and not stored. The events of what was created go to the outbox in one
// write. The error is the database's: the caller rolls back.
//
// The ledger's write and the events' travel with the commit's round trip
// (driver.Later): neither failure is an answer, and the key's outcome is
// recorded in that round trip too.
func (s *Server) applyWrites(ctx context.Context, tx driver.Tx, ws []ledgerWrite) ([]idem.ItemResult, error) {
	tx = driver.Later(tx)
	ops := make([]ledger.Op, len(ws))
	for i := range ws {
		ops[i] = ws[i].op
	}
	res, err := s.ledger.Apply(ctx, tx, ops)
	if err != nil {
		return nil, err
	}
	if s.testHooks.applied != nil {
		keys := make([]idem.Key, len(ws))
		for i := range ws {
			keys[i] = ws[i].key
		}
		s.testHooks.applied(keys)
	}
	out := make([]idem.ItemResult, len(ops))
	var events []outbox.Message
	var trc trace.SpanContext
	batchTrace := trace.SpanContextFromContext(ctx).TraceID()
	// The event carries the resource's JSON that the answer carries
	// (created): one encoding of it for both.
	event := func(tenant, typ, key string, resource any, payload []byte) error {
		m := outbox.Message{Tenant: tenant, Type: typ, Key: key, Payload: payload}
		var err error
		if payload == nil {
			m, err = newEvent(tenant, typ, key, resource)
		}
		m.Trace = trc
		events = append(events, m)
		return err
	}
	for i, r := range res {
		op := &ops[i]
		// An event continues its request's trace: from the outbox.Enqueue
		// span when the request runs in its own transaction, from the
		// request's span when it shares a batch's (a trace of its own).
		trc = trace.SpanContext{}
		if ws[i].trace.TraceID() != batchTrace {
			trc = ws[i].trace
		}
		switch {
		case r.Err != nil:
			out[i] = refusal(r.Err, op.Reversal != nil || op.Settlement != nil)
		case r.Account != nil:
			a := r.Account
			var payload []byte
			out[i].Outcome, payload = created("/v1/accounts/"+a.ID, a)
			if !a.Existing {
				err = event(op.Tenant, "account.created", "account/"+a.ID, a, payload)
			}
		default:
			t := r.Transfer
			var payload []byte
			out[i].Outcome, payload = created("/v1/transfers/"+t.ID, t)
			if !t.Existing {
				typ, key := transferEvent(t)
				err = event(op.Tenant, typ, key, t, payload)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if len(events) > 0 {
		if err := s.outbox.Enqueue(ctx, tx, events...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ledgerProblem is how the API answers a ledger refusal, and whether the
// answer is the key's stored outcome. A refusal of the request's input is
// 400 invalid_request, not stored: the corrected request may reuse the
// key. A reversal, post or void of a transfer that does not exist is 404,
// the path's resource, not stored either: the transfer may be created
// after it (its own request still in flight), and the retry must then do
// the work rather than replay a 404 for a day. Any other refusal is 422
// with the ledger's code, a business answer that is stored.
func ledgerProblem(le *ledger.Error, pathTransfer bool) (p problem.Details, stored bool) {
	switch {
	case errors.Is(le, ledger.ErrInvalidRequest), errors.Is(le, ledger.ErrInvalidAmount), errors.Is(le, ledger.ErrInvalidTimeout):
		return problem.New(http.StatusBadRequest, codeInvalidRequest, le.Message), false
	case errors.Is(le, ledger.ErrTransferNotFound) && pathTransfer:
		return problem.New(http.StatusNotFound, codeNotFound, le.Message), false
	}
	return problem.New(http.StatusUnprocessableEntity, le.Code, le.Message), true
}

// refusal is a ledger refusal as a batch item's answer.
func refusal(le *ledger.Error, pathTransfer bool) idem.ItemResult {
	p, stored := ledgerProblem(le, pathTransfer)
	var rec outcomeRecorder
	p.Write(&rec)
	if !stored {
		return idem.ItemResult{Err: &idemhttp.ResponseError{Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}}
	}
	return idem.ItemResult{Outcome: rec.outcome()}
}

// created is a 201 answer with the resource at location, as writeJSON
// writes it, and the resource's JSON (json.Marshal, the answer's body
// without its newline), which its event carries too; nil when v cannot
// be encoded, and then the answer is writeJSON's.
func created(location string, v any) (idem.Outcome, []byte) {
	payload, err := json.Marshal(v)
	if err != nil {
		var rec outcomeRecorder
		rec.Header().Set("Location", location)
		writeJSON(&rec, http.StatusCreated, v)
		return rec.outcome(), nil
	}
	payload = payload[:len(payload):len(payload)] // the body's newline goes to a copy
	body := append(payload, '\n')
	vals := [...]string{location, strconv.Itoa(len(body))}
	return idem.Outcome{Status: http.StatusCreated, Body: body, Header: http.Header{
		"Location":       vals[0:1:1],
		"Content-Type":   contentJSON,
		"Content-Length": vals[1:2:2],
	}}, payload
}

// contentJSON is the Content-Type of created's answers, shared: a header's
// values are replaced, never written in place.
var contentJSON = []string{"application/json"}

// outcomeRecorder records an answer written with the server's writers
// (writeJSON, problem.Details.Write), so that a batch's answers are the
// bytes the same writers send on a request's own response.
type outcomeRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (o *outcomeRecorder) Header() http.Header {
	if o.header == nil {
		o.header = make(http.Header)
	}
	return o.header
}

func (o *outcomeRecorder) WriteHeader(status int) { o.status = status }

func (o *outcomeRecorder) Write(b []byte) (int, error) {
	if o.status == 0 {
		o.status = http.StatusOK
	}
	return o.body.Write(b)
}

// outcome is the answer to store (idemhttp keeps its allow-listed
// headers) and to send first.
func (o *outcomeRecorder) outcome() idem.Outcome {
	return idem.Outcome{Status: o.status, Header: o.header, Body: o.body.Bytes()}
}

// writeOne is a ledger write's handler without group commit: the request's
// op, applied alone in the transaction idemhttp's middleware began for it
// (or, unguarded, in its own: ownTx), and answered as applyWrites answers
// it.
func (s *Server) writeOne(decode func(http.ResponseWriter, *http.Request, []byte) (ledgerWrite, bool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wr, ok := decode(w, r, nil)
		if !ok {
			return
		}
		res, err := s.applyWrites(r.Context(), txOf(r.Context()), []ledgerWrite{wr})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out := res[0].Outcome
		if re, ok := errors.AsType[*idemhttp.ResponseError](res[0].Err); ok {
			idemhttp.MarkInvalid(r.Context()) // only 400s are not stored
			out = idem.Outcome{Status: re.Status, Header: re.Header, Body: re.Body}
		}
		for k, vs := range out.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(out.Status)
		_, _ = w.Write(out.Body)
	}
}
