package webhook

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) {
	code := testpg.Main(m)
	// The leak check is skipped while fuzzing: the fuzzing engine's own
	// goroutines may still be winding down when m.Run returns.
	if f := flag.Lookup("test.fuzz"); f == nil || f.Value.String() == "" {
		code = leakcheck.After(code)
	}
	os.Exit(code)
}

// TestRedeliveryRunsOnce is principle 5 end to end, on Postgres and
// SQLite: Stripe delivers an event, then redelivers it minutes later with a
// new timestamp and a signature by the rotated secret. The keeper, keyed
// by DedupeRequest, runs the registered handler once, stores one record,
// and answers the redelivery with the stored outcome. A forged delivery
// stores nothing.
func TestRedeliveryRunsOnce(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		k, err := idem.New(d, idem.Config{Retention: 30 * 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		eps, err := ParseConfig([]byte("webhooks:\n  stripe-main:\n    provider: stripe\n    secrets: [whsec_old, whsec_new]\n    tenant: acme\n"))
		if err != nil {
			t.Fatal(err)
		}
		ep := eps["stripe-main"]
		v := mustVerifier(t, ep)

		var runs atomic.Int32
		var seen atomic.Value
		reg := NewRegistry()
		reg.Handle("stripe", "invoice.paid", func(ctx context.Context, tx driver.Tx, e Event) error {
			runs.Add(1)
			seen.Store(e.ID)
			return nil
		})

		intake := func(h http.Header, body []byte, now time.Time) (idem.Result, error) {
			ev, err := v.Verify(h, body, now)
			if err != nil {
				return idem.Result{}, err
			}
			handler, ok := reg.Lookup(ev)
			return k.Do(ctx, DedupeRequest(ep, ev), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
				if ok {
					if err := handler(ctx, tx, ev); err != nil {
						return idem.Outcome{}, err
					}
				}
				return idem.Outcome{Status: http.StatusOK, Body: []byte(`{"received":true}`)}, nil
			})
		}

		body := []byte(`{"id":"evt_redelivered","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`)
		first := delivery{body: body, ts: t0}
		again := delivery{body: body, ts: t0.Add(4 * time.Minute)}

		r1, err := intake(signStripe([]string{"whsec_old"}, first), body, first.ts)
		if err != nil || r1.Replayed || r1.Status != 200 {
			t.Fatalf("first delivery: %+v, %v", r1, err)
		}
		r2, err := intake(signStripe([]string{"whsec_new"}, again), body, again.ts.Add(2*time.Second))
		if err != nil || !r2.Replayed || r2.Status != 200 || string(r2.Body) != `{"received":true}` {
			t.Fatalf("redelivery: %+v, %v", r2, err)
		}
		if runs.Load() != 1 || seen.Load() != "evt_redelivered" {
			t.Fatalf("handler ran %d times", runs.Load())
		}
		rec, err := k.Lookup(ctx, idem.Key{Scope: "acme", Operation: "webhook:stripe-main", Key: "evt_redelivered"})
		if err != nil || rec.Outcome.Status != 200 || !rec.ExpiresAt.After(time.Now().Add(29*24*time.Hour)) {
			t.Fatalf("stored record: %+v, %v", rec, err)
		}

		forged := []byte(`{"id":"evt_forged","object":"event","type":"invoice.paid"}`)
		_, err = intake(signStripe([]string{"whsec_attacker"}, delivery{body: forged, ts: t0}), forged, t0)
		if status, code := HTTPStatus(err); status != 401 || code != CodeSignatureInvalid {
			t.Fatalf("forged: %d %s (%v)", status, code, err)
		}
		if _, err := k.Lookup(ctx, idem.Key{Scope: "acme", Operation: "webhook:stripe-main", Key: "evt_forged"}); !errors.Is(err, driver.ErrNotFound) {
			t.Fatalf("forged delivery left a record: %v", err)
		}
		if runs.Load() != 1 {
			t.Fatalf("handler ran %d times", runs.Load())
		}
	})
}
