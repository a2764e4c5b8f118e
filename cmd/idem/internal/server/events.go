package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox"
)

// newEvent is the event of a change, to enqueue in the change's own
// transaction: it exists if and only if the change commits. resource is
// as the API returns it; key orders the events of one resource.
func newEvent(tenant, typ, key string, resource any) (outbox.Message, error) {
	payload, err := json.Marshal(resource)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("encode %s event: %w", typ, err)
	}
	return outbox.Message{Tenant: tenant, Type: typ, Key: key, Payload: payload}, nil
}

// listEvents answers GET /v1/events: the tenant's events in commit order,
// oldest first, with their publish state.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	var (
		events []outbox.Event
		next   string
	)
	err := s.readTx(r.Context(), func(tx driver.Tx) (err error) {
		events, next, err = s.outbox.List(r.Context(), tx, outbox.ListQuery{Tenant: tenantFrom(r.Context()),
			After: r.URL.Query().Get("after"), Limit: limit})
		return err
	})
	if errors.Is(err, outbox.ErrInvalidCursor) {
		badRequest(w, "after: not a cursor this API returned")
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page(events, next))
}
