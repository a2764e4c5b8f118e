package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
)

// idem_ready is the readiness check taken at each scrape: 1 while the
// database answers, 0 once it does not, with no request or /readyz poll
// needed to notice, so an alert sees an outage of an idle service.
func TestReadyMetric(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		cfg := config.Default()
		cfg.Relay = false
		s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, path, nil)
			r.Host = "localhost" // no API keys: loopback names only
			s.Handler().ServeHTTP(w, r)
			return w
		}
		if m := get("/metrics").Body.String(); !strings.Contains(m, "\nidem_ready 1\n") {
			t.Fatalf("metrics of a ready service lack idem_ready 1:\n%s", m)
		}
		if err := d.Close(); err != nil { // the database is gone
			t.Fatal(err)
		}
		if m := get("/metrics").Body.String(); !strings.Contains(m, "\nidem_ready 0\n") {
			t.Fatalf("metrics without a database lack idem_ready 0:\n%s", m)
		}
		if w := get("/readyz"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" ||
			!strings.Contains(w.Body.String(), "database unreachable") {
			t.Fatalf("readyz without a database: %d %v %s", w.Code, w.Header(), w.Body)
		}
	})
}

// With API keys (a port others reach) and no --metrics-addr, /metrics on
// the API's port takes the admin key: its series name tenants and their
// traffic. Without an admin key it is not served there (404, naming
// --metrics-addr and --admin-key); a tenant's API key is not enough (401).
// Without API keys it is served as before (loopback only).
func TestMetricsNeedTheAdminKeyWithAPIKeys(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	keys, err := config.ParseAPIKeys("acme:secret-acme-key-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := config.ParseAdminKey("admin-key-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	serve := func(withAdmin bool) *Server {
		cfg := config.Default()
		cfg.Relay = false
		cfg.APIKeys = keys
		if withAdmin {
			cfg.AdminKeyHash = admin
		}
		s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	get := func(s *Server, path, token string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Host = "idem.example.com"
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		s.Handler().ServeHTTP(w, r)
		return w
	}
	noAdmin := serve(false)
	// A tenant's request, so that the series would name it.
	if w := get(noAdmin, "/v1/accounts/nope", "secret-acme-key-0123456789"); w.Code != 404 {
		t.Fatalf("tenant read: %d %s", w.Code, w.Body)
	}
	for _, token := range []string{"", "secret-acme-key-0123456789"} {
		w := get(noAdmin, "/metrics", token)
		if w.Code != 404 || strings.Contains(w.Body.String(), "acme") || !strings.Contains(w.Body.String(), "--metrics-addr") {
			t.Errorf("no admin key, token %q: %d %s", token, w.Code, w.Body)
		}
	}
	withAdmin := serve(true)
	for _, token := range []string{"", "secret-acme-key-0123456789", "admin-key-0123456789abcdeX"} {
		w := get(withAdmin, "/metrics", token)
		if w.Code != 401 || strings.Contains(w.Body.String(), "idem_") || w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("admin key set, token %q: %d %s", token, w.Code, w.Body)
		}
	}
	if w := get(withAdmin, "/metrics", "admin-key-0123456789abcdef"); w.Code != 200 || !strings.Contains(w.Body.String(), "idem_ready") {
		t.Errorf("the admin key: %d %.200s", w.Code, w.Body)
	}
	// Health stays open: it names nobody.
	if w := get(noAdmin, "/healthz", ""); w.Code != 200 {
		t.Errorf("/healthz: %d", w.Code)
	}
}
