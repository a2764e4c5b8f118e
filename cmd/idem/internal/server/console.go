package server

import (
	"net/http"

	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/internal/inspect"
)

// mountConsole serves the operator console under /ui/ on mux, with the
// service's database, ledger and admin key. The console does its own
// authentication (the admin key, not tenants' API keys).
func (s *Server) mountConsole(mux *http.ServeMux) {
	c, err := console.New(console.Config{
		Driver:       s.d,
		Ledger:       s.ledger,
		AdminKeyHash: s.cfg.AdminKeyHash,
		Outbox:       inspect.NewOutboxView(s.outbox),
		Logger:       s.log,
		Currencies:   s.currencies,
		KeyRetention: s.cfg.KeyRetention,
		Endpoints:    s.endpoints,
	})
	if err != nil {
		// Only a broken build (templates) or an exhausted random source gets
		// here; the API still serves, the console says why it cannot.
		s.log.Error("idem: console unavailable", "err", err)
		mux.Handle(console.Prefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "the console is unavailable; see the service log", http.StatusInternalServerError)
		}))
		return
	}
	s.console = c
	mux.Handle(console.Prefix, s.observe(console.Prefix, c.Handler()))
}
