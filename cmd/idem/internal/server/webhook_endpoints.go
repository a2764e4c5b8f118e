package server

import (
	"errors"
	"net/http"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/problem"
	"github.com/idemhq/idem/outbox/webhookout"
)

// The tenants' own webhook endpoints: /v1/webhook-endpoints. Writes run in
// the transaction of their Idempotency-Key, as every write: a retried
// create answers the same endpoint, with the same secret, and registers
// none other. Each tenant sees and changes only its own endpoints; another
// tenant's id is 404, as an unknown one.

// codeTooManyEndpoints: the tenant has webhookout.MaxEndpoints endpoints.
const codeTooManyEndpoints = "too_many_endpoints"

func (s *Server) webhookEndpointRoutes(write, read func(string, http.HandlerFunc)) {
	write("POST /v1/webhook-endpoints", s.createEndpoint)
	read("GET /v1/webhook-endpoints", s.listEndpoints)
	read("GET /v1/webhook-endpoints/{id}", s.getEndpoint)
	write("PATCH /v1/webhook-endpoints/{id}", s.updateEndpoint)
	write("DELETE /v1/webhook-endpoints/{id}", s.deleteEndpoint)
	write("POST /v1/webhook-endpoints/{id}/rotate-secret", s.rotateEndpointSecret)
	read("GET /v1/webhook-endpoints/{id}/attempts", s.listEndpointAttempts)
	write("POST /v1/webhook-endpoints/{id}/replay", s.replayEndpoint)
}

// endpointFail answers webhookout's errors; the rest go to fail.
func (s *Server) endpointFail(w http.ResponseWriter, r *http.Request, err error) {
	var ie *webhookout.InputError
	switch {
	case errors.As(err, &ie):
		invalid(w, r, ie.Field+": "+ie.Reason)
	case errors.Is(err, webhookout.ErrNotFound):
		problem.Write(w, http.StatusNotFound, codeNotFound, "no such webhook endpoint or event")
	case errors.Is(err, webhookout.ErrTooMany):
		problem.Write(w, http.StatusUnprocessableEntity, codeTooManyEndpoints, err.Error())
	default:
		s.fail(w, r, err)
	}
}

func (s *Server) createEndpoint(w http.ResponseWriter, r *http.Request) {
	var in webhookout.NewEndpoint
	if err := decode(r, &in); err != nil {
		invalid(w, r, err.Error())
		return
	}
	ep, err := s.endpoints.Create(r.Context(), txOf(r.Context()), tenantFrom(r.Context()), in)
	if err != nil {
		s.endpointFail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/webhook-endpoints/"+ep.ID)
	writeJSON(w, http.StatusCreated, ep)
}

func (s *Server) listEndpoints(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	var (
		eps  []webhookout.Endpoint
		next string
	)
	err := s.readTx(r.Context(), func(tx driver.Tx) (err error) {
		eps, next, err = s.endpoints.List(r.Context(), tx, tenantFrom(r.Context()), r.URL.Query().Get("after"), limit)
		return err
	})
	if err != nil {
		s.endpointFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page(eps, next))
}

func (s *Server) getEndpoint(w http.ResponseWriter, r *http.Request) {
	var ep webhookout.Endpoint
	err := s.readTx(r.Context(), func(tx driver.Tx) (err error) {
		ep, err = s.endpoints.Get(r.Context(), tx, tenantFrom(r.Context()), r.PathValue("id"))
		return err
	})
	if err != nil {
		s.endpointFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

func (s *Server) updateEndpoint(w http.ResponseWriter, r *http.Request) {
	var p webhookout.EndpointPatch
	if err := decode(r, &p); err != nil {
		invalid(w, r, err.Error())
		return
	}
	ep, err := s.endpoints.Update(r.Context(), txOf(r.Context()), tenantFrom(r.Context()), r.PathValue("id"), p)
	if err != nil {
		s.endpointFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

func (s *Server) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	if err := s.endpoints.Delete(r.Context(), txOf(r.Context()), tenantFrom(r.Context()), r.PathValue("id")); err != nil {
		s.endpointFail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// rotateRequest is POST /v1/webhook-endpoints/{id}/rotate-secret's body.
type rotateRequest struct {
	// Secret, when set, is the new secret; otherwise one is generated.
	Secret string `json:"secret"`
}

func (s *Server) rotateEndpointSecret(w http.ResponseWriter, r *http.Request) {
	var in rotateRequest
	if err := decode(r, &in); err != nil {
		invalid(w, r, err.Error())
		return
	}
	ep, err := s.endpoints.RotateSecret(r.Context(), txOf(r.Context()), tenantFrom(r.Context()), r.PathValue("id"), in.Secret)
	if err != nil {
		s.endpointFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

func (s *Server) listEndpointAttempts(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	var (
		att  []webhookout.Attempt
		next string
	)
	q := webhookout.AttemptQuery{EventID: r.URL.Query().Get("event_id"), After: r.URL.Query().Get("after"), Limit: limit}
	err := s.readTx(r.Context(), func(tx driver.Tx) (err error) {
		att, next, err = s.endpoints.Attempts(r.Context(), tx, tenantFrom(r.Context()), r.PathValue("id"), q)
		return err
	})
	var ie *webhookout.InputError
	if errors.As(err, &ie) {
		badRequest(w, ie.Field+": "+ie.Reason)
		return
	}
	if err != nil {
		s.endpointFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page(att, next))
}

// replayRequest is POST /v1/webhook-endpoints/{id}/replay's body: one of
// the two.
type replayRequest struct {
	Since   *time.Time `json:"since"`
	EventID string     `json:"event_id"`
}

type replayResponse struct {
	Deliveries int `json:"deliveries"`
}

func (s *Server) replayEndpoint(w http.ResponseWriter, r *http.Request) {
	var in replayRequest
	if err := decode(r, &in); err != nil {
		invalid(w, r, err.Error())
		return
	}
	q := webhookout.Replay{EventID: in.EventID}
	if in.Since != nil {
		q.Since = *in.Since
	}
	n, err := s.endpoints.Replay(r.Context(), txOf(r.Context()), tenantFrom(r.Context()), r.PathValue("id"), q)
	if err != nil {
		s.endpointFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, replayResponse{Deliveries: n})
}
