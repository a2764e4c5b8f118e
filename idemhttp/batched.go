package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/idemhq/idem"
)

// Batched returns a handler that runs a route's first arrivals through b,
// the keeper's group commit: the requests of the moment share one
// transaction (see idem.Batcher). Everything else is the middleware's, as
// for a handler under Wrap: the Idempotency-Key checks, the body's bound,
// the replay cache, the fingerprint, 422 on reuse, replays with
// Idempotent-Replayed, 409 in flight, 503 with Retry-After when the
// database fails or the batcher is busy (idem.ErrBusy), the problem codes
// and Config.OnAnswer.
//
// decode turns a request into b's item. It runs only for a request that
// goes into a batch — not for a replay, nor for a reuse — before the batch,
// outside any transaction: idemhttp.KeyFrom works in r.Context(), Tx
// returns nil. When it refuses the request it writes the refusal to w (a
// 400 problem, as a rule) and returns false: the refusal is sent, counted
// KindInvalid (KindHandlerError for a 5xx), and not stored, so the
// key stays free for the corrected request. A false without a 4xx or 5xx
// written is a bug, answered 500.
//
// The work of b answers each item with the outcome to store, which the
// client gets with every header the work set (replays get the allow-listed
// ones, Config.ReplayHeaders). A transient failure, or a refusal found only
// inside the transaction, is not an outcome: the work sets the item's
// idem.ItemResult.Err to a *ResponseError, which is sent as it is and not
// stored. Any other error is answered as Wrap answers a failed keeper.
//
// Batched guards every request it is given, whatever its method: route it
// under the method it serves ("POST /v1/transfers").
func Batched[T any](m *Middleware, b *idem.Batcher[T], decode func(w http.ResponseWriter, r *http.Request, body []byte) (T, bool)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, func(r *http.Request, key idem.Key, fp, body []byte) (idem.Result, answer, error) {
			var refused answer
			res, err := b.DoFunc(r.Context(), idem.Request{Key: key, Fingerprint: fp, StoreHeaders: m.replay, StoreBody: m.storeBody}, func(ctx context.Context) (T, error) {
				rec := newRecorder(m.cfg.MaxResponseBytes)
				hr, _ := m.handlerRequest(ctx, r, nil, key, body)
				item, ok := decode(rec, hr, body)
				if ok {
					return item, nil
				}
				if rec.tooLong {
					return item, errResponseTooLarge
				}
				status, header := rec.result()
				refused = answer{status: status, header: header, body: rec.body}
				return item, notStoredAnswer(status)
			})
			if re, ok := errors.AsType[*ResponseError](err); ok {
				header := re.Header.Clone()
				if header == nil {
					header = make(http.Header)
				}
				return res, answer{status: re.Status, header: header, body: re.Body}, notStoredAnswer(re.Status)
			}
			if err == nil && !res.Replayed {
				return res, answer{status: res.Status, header: res.Header, body: res.Body}, nil
			}
			return res, refused, err
		})
	})
}

// notStoredAnswer is why an answer made not to be stored is not: a 5xx is
// a transient failure, a 4xx a refusal of the request (errHandlerFailed
// and errInvalid, as notStored says of a handler's). Anything else
// contradicts itself and is answered 500.
func notStoredAnswer(status int) error {
	switch {
	case status >= 500:
		return errHandlerFailed
	case status >= 400:
		return errInvalid
	}
	return fmt.Errorf("idemhttp: an answer not to be stored has status %d, not 4xx or 5xx", status)
}

// ResponseError is an answer a batch's work gives one request without
// storing it (see Batched): set it as the item's idem.ItemResult.Err. The
// client gets Status, Header and Body as they are; the item's claim is
// released and the key stays free for the retry. The work must have
// written nothing for the item, since the rest of the batch commits.
//
// A 5xx is a transient failure (counted KindHandlerError; a 503 without
// Retry-After gets Config.RetryAfter), a 4xx a refusal of the request
// (KindInvalid). Any other status is a bug, answered 500.
type ResponseError struct {
	Status int
	Header http.Header
	Body   []byte
}

func (e *ResponseError) Error() string {
	return "idemhttp: answered " + strconv.Itoa(e.Status) + " without storing it"
}
