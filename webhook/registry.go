package webhook

import (
	"context"
	"fmt"
	"sync"

	"github.com/idemhq/idem/driver"
)

// Handler runs a verified, first-seen event inside the intake's dedupe
// transaction: whatever it writes through tx commits together with the
// event's dedupe key, or not at all. It must not publish, mail or call out
// (write an outbox row instead) and must not commit or roll back tx. An
// error rolls everything back, so the provider's retry runs it again.
type Handler func(ctx context.Context, tx driver.Tx, e Event) error

// AnyType registers a handler for every event type of a provider that has
// no handler of its own.
const AnyType = "*"

// Registry maps (provider, event type) to the Go handler the intake runs.
// It is safe for concurrent use; handlers are normally registered at start.
type Registry struct {
	mu       sync.RWMutex
	handlers map[[2]string]Handler
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{handlers: map[[2]string]Handler{}}
}

// Handle registers h for the provider's eventType (or AnyType). Like
// http.ServeMux, it panics on a nil handler, an unknown provider, an empty
// type or a second registration of the same pair: those are programming
// errors, found at start rather than at the first delivery.
func (r *Registry) Handle(provider, eventType string, h Handler) {
	known := false
	for _, p := range Providers {
		known = known || p == provider
	}
	switch {
	case !known:
		panic(fmt.Sprintf("webhook: Handle: unknown provider %q", provider))
	case eventType == "":
		panic("webhook: Handle: empty event type (use AnyType for all)")
	case h == nil:
		panic("webhook: Handle: nil handler")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]string{provider, eventType}
	if _, dup := r.handlers[k]; dup {
		panic(fmt.Sprintf("webhook: Handle: %s %s registered twice", provider, eventType))
	}
	r.handlers[k] = h
}

// Lookup returns the handler for ev's provider and type, else the
// provider's AnyType handler. ok is false when neither exists: the intake
// then only records the event (dedupe key and outbox message).
func (r *Registry) Lookup(ev Event) (h Handler, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if h, ok = r.handlers[[2]string{ev.Provider, ev.Type}]; ok {
		return h, true
	}
	h, ok = r.handlers[[2]string{ev.Provider, AnyType}]
	return h, ok
}
