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
