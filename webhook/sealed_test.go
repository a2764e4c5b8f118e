package webhook

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/sealtest"
	"github.com/idemhq/idem/outbox"
)

const intakeMarker = "MARKER-INTAKE-378282246310005"

// published is a Publisher that keeps what the relay gives it.
type published struct {
	mu   sync.Mutex
	msgs []outbox.Message
}

func (p *published) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msgs...)
	return make([]error, len(msgs))
}

func (p *published) Close() error { return nil }

func (p *published) got() []outbox.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]outbox.Message(nil), p.msgs...)
}

// An intake whose keeper and outbox seal stores no plaintext of a
// delivery's body: not in its stored answer, not in its webhook.* event.
// The relay publishes the event in plaintext, a redelivery replays, and a
// redelivery after the tenant was forgotten is acknowledged as the
// duplicate it is, the handler not run again.
func TestSealedIntake(t *testing.T) {
	t.Parallel()
	sealtest.Each(t, func(t *testing.T, d driver.Driver, dir string) {
		ctx := context.Background()
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE handled (event_id TEXT PRIMARY KEY, type TEXT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		s := sealtest.New()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		k, err := idem.New(d, idem.Config{Retention: Retention, Logger: quiet, Sealer: s})
		if err != nil {
			t.Fatal(err)
		}
		ob, err := outbox.New(d, outbox.Config{MaxPayloadBytes: MaxEventPayloadBytes, Sealer: s})
		if err != nil {
			t.Fatal(err)
		}
		reg := NewRegistry()
		reg.Handle("stripe", "invoice.paid", insertHandled)
		in, err := NewIntake(IntakeConfig{Keeper: k, Outbox: ob, Handlers: reg, Logger: quiet,
			Endpoints: []Endpoint{{Name: "stripe-main", Provider: "stripe", Secrets: []string{"whsec_old"}, Tenant: "acme"}}})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("POST /hooks/{endpoint}", in)
		now := time.Now()
		body := `{"id":"evt_sealed","object":"event","type":"invoice.paid","data":{"object":{"card":"` + intakeMarker + `"}}}`
		const answer = `{"event_id":"evt_sealed","received":true}` + "\n"

		w := post(mux, "/hooks/stripe-main", "whsec_old", body, now)
		if w.Code != 200 || w.Body.String() != answer {
			t.Fatalf("first delivery: %d %s", w.Code, w.Body)
		}
		if n := sealtest.Absent(t, d, dir, intakeMarker, "idem_keys", "idem_outbox"); d.Dialect() == "postgres" && n != 2 {
			t.Fatalf("read %d rows, want a key and an event", n)
		}
		w = post(mux, "/hooks/stripe-main", "whsec_old", body, now.Add(time.Minute))
		if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != answer {
			t.Fatalf("redelivery: %d %v %s", w.Code, w.Header(), w.Body)
		}

		var pub published
		r, err := outbox.NewRelay(d, outbox.RelayConfig{Publisher: &pub, Sealer: s, PollInterval: 10 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		ended := make(chan error, 1)
		go func() { ended <- r.Run(rctx) }()
		for deadline := time.Now().Add(20 * time.Second); len(pub.got()) == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-ended
		got := pub.got()
		if len(got) != 1 || got[0].Type != "webhook.stripe.invoice.paid" || !strings.Contains(string(got[0].Payload), intakeMarker) {
			t.Fatalf("published %+v; want the event with the body in plaintext", got)
		}

		s.Forget("acme")
		w = post(mux, "/hooks/stripe-main", "whsec_old", body, now.Add(2*time.Minute))
		if w.Code != 200 || w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != answer {
			t.Fatalf("redelivery of a forgotten tenant: %d %v %s", w.Code, w.Header(), w.Body)
		}
		var handled, events int
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM handled`).Scan(&handled); err != nil {
			t.Fatal(err)
		}
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_outbox`).Scan(&events); err != nil {
			t.Fatal(err)
		}
		if handled != 1 || events != 1 {
			t.Fatalf("handled %d, events %d; want 1, 1", handled, events)
		}
	})
}
