package webhook

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
)

// wantRetryLater checks a 503 unavailable problem with Retry-After ra.
func wantRetryLater(t *testing.T, w *httptest.ResponseRecorder, ra string) {
	t.Helper()
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if w.Code != http.StatusServiceUnavailable || p.Status != w.Code || p.Code != CodeUnavailable ||
		w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %s, want 503 unavailable", w.Code, w.Body)
	}
	if got := w.Header().Get("Retry-After"); got != ra {
		t.Fatalf("Retry-After %q, want %q (IntakeConfig.RetryAfter)", got, ra)
	}
}

// A delivery the database cannot take now, because its request's deadline
// passed or it was canceled, is 503 unavailable with the configured
// Retry-After, like any database fault (idemhttp.ProblemFor): it runs
// nothing and stores nothing, and the provider's next delivery runs the
// handler once. A passed deadline used to be 500 internal_error, and a
// canceled request's 503 had no Retry-After.
func TestIntakeRetryAfterWhenTheRequestEnds(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var runs atomic.Int32
		f := newIntakeFixture(t, d, IntakeConfig{RetryAfter: 7 * time.Second,
			Handler: func(ctx context.Context, tx driver.Tx, e Event) error {
				runs.Add(1)
				return insertHandled(ctx, tx, e)
			}})
		h := f.in.Endpoint("stripe-main")
		body := `{"id":"evt_late","object":"event","type":"invoice.paid"}`

		expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancelExpired()
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		for _, ctx := range []context.Context{expired, canceled} {
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/stripe", strings.NewReader(body))
			r.Header = signStripe([]string{"whsec_old"}, delivery{body: []byte(body), ts: time.Now()})
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			wantRetryLater(t, w, "7")
		}
		if got := f.stored(t); got != [3]int{0, 0, 0} || runs.Load() != 0 {
			t.Fatalf("rows, events, keys = %v after %d runs; want nothing", got, runs.Load())
		}

		w := post(h, "/stripe", "whsec_old", body, time.Now())
		if w.Code != http.StatusOK {
			t.Fatalf("the next delivery: %d %s", w.Code, w.Body)
		}
		if got := f.stored(t); got != [3]int{1, 1, 1} || runs.Load() != 1 {
			t.Fatalf("rows, events, keys = %v after %d runs; want 1 1 1 after 1", got, runs.Load())
		}
		want := []string{"stripe-main unavailable", "stripe-main error", "stripe-main first"}
		if got := f.takeOutcomes(); !slices.Equal(got, want) {
			t.Fatalf("kinds %q, want %q", got, want)
		}
	})
}

// With the database unreachable a delivery is 503 unavailable with the
// configured Retry-After, and its handler never runs.
func TestIntakeRetryAfterWhenTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dialect string
		open    func(t *testing.T) driver.Driver
	}{
		{"postgres", func(t *testing.T) driver.Driver {
			// A loopback port nobody listens on: a stopped server.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			d, err := postgres.Open(context.Background(), postgres.Config{URL: "postgres://idem@" + addr + "/idem?connect_timeout=5"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			return d
		}},
		{"sqlite", func(t *testing.T) driver.Driver {
			// The database's directory disappears under a running process
			// (an unmounted volume): new connections cannot open the file.
			dir := filepath.Join(t.TempDir(), "data")
			d, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "idem.db")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			if err := d.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			return d
		}},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			t.Parallel()
			d := tc.open(t)
			k, err := idem.New(d, idem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			ob, err := outbox.New(d, outbox.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			in, err := NewIntake(IntakeConfig{Keeper: k, Outbox: ob, RetryAfter: 7 * time.Second,
				Endpoints: []Endpoint{{Name: "stripe-main", Provider: "stripe", Secrets: []string{"whsec_old"}}},
				Handler:   func(context.Context, driver.Tx, Event) error { runs.Add(1); return nil }})
			if err != nil {
				t.Fatal(err)
			}
			w := post(in.Endpoint("stripe-main"), "/stripe", "whsec_old", `{"id":"evt_down","type":"invoice.paid"}`, time.Now())
			wantRetryLater(t, w, "7")
			if runs.Load() != 0 {
				t.Fatalf("the handler ran %d times with the database down", runs.Load())
			}
		})
	}
}
