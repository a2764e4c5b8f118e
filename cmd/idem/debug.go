package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/config"
)

// debugHandler serves Go's profiler under /debug/pprof/. A profile shows
// what the process holds, so with an admin key every request must carry
// it as a bearer token; without one the address is loopback (config
// refuses any other) and a request must name a loopback Host, so that a
// web page cannot reach it by DNS rebinding.
func debugHandler(adminKey *[sha256.Size]byte) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if adminKey == nil && !config.IsLoopbackHost(r.Host) {
			http.Error(w, "the profiler answers loopback hosts only", http.StatusForbidden)
			return
		}
		if adminKey != nil {
			token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(token))
			if !ok || subtle.ConstantTimeCompare(sum[:], adminKey[:]) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "the profiler needs the admin key as a bearer token", http.StatusUnauthorized)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// serveDebug serves debugHandler on ln until stop is called. A CPU
// profile runs for the seconds it is asked for, so the server has no
// write timeout; stop waits at most 5 s for the profiles under way.
func serveDebug(ln net.Listener, adminKey *[sha256.Size]byte, log *slog.Logger) (stop func()) {
	srv := &http.Server{
		Handler:           debugHandler(adminKey),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("idem: debug server stopped", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}
}
