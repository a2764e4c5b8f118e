package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox"
)

// emit writes the event of a change in the change's own transaction: the
// event exists if and only if the change commits. payload is the resource
// as the API returns it; key orders the events of one resource.
func (s *Server) emit(ctx context.Context, tx driver.Tx, tenant, typ, key string, resource any) error {
	payload, err := json.Marshal(resource)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", typ, err)
	}
	return s.outbox.Enqueue(ctx, tx, outbox.Message{Tenant: tenant, Type: typ, Key: key, Payload: payload})
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
		events, next, err = s.outbox.List(r.Context(), tx, tenantFrom(r.Context()), r.URL.Query().Get("after"), limit)
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
