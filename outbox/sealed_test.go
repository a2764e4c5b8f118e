package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/sealtest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/seal"
)

const sealMarker = "MARKER-OUTBOX-5500005555555559"

// capture is a Publisher that keeps what it is given.
type capture struct {
	mu   sync.Mutex
	msgs []outbox.Message
}

func (c *capture) Publish(_ context.Context, msgs []outbox.Message) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, msgs...)
	return make([]error, len(msgs))
}

func (c *capture) Close() error { return nil }

func (c *capture) got() []outbox.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]outbox.Message(nil), c.msgs...)
}

func enqueue(t *testing.T, d driver.Driver, ob *outbox.Outbox, msgs ...outbox.Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := ob.Enqueue(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// listed is ob.List of tenant acme's events once at least n are listed,
// or its first error. On PostgreSQL a row is listed only once every
// transaction that began before its own committed has ended (the list's
// horizon, pg_snapshot_xmin), and other tests' transactions run in the
// same cluster: the list is asked again until then, for 20 s at most.
func listed(t *testing.T, ob *outbox.Outbox, d driver.Driver, n int) ([]outbox.Event, error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		events, _, err := ob.List(context.Background(), d.Reader(), outbox.ListQuery{Tenant: "acme"})
		if err != nil || len(events) >= n {
			return events, err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events listed after 20 s, want %d", len(events), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// relayUntil runs a relay on d until done says so (or 20 s pass).
func relayUntil(t *testing.T, d driver.Driver, cfg outbox.RelayConfig, done func() bool) {
	t.Helper()
	cfg.PollInterval, cfg.BackoffMin = 10*time.Millisecond, 10*time.Millisecond
	r, err := outbox.NewRelay(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- r.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for !done() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-ended
	if !done() {
		t.Fatal("the relay did not get there in 20 s")
	}
}

// Sealed messages hold no plaintext at rest, and the relay, List and Dead
// give it back; rows enqueued before the Sealer publish too; a forgotten
// tenant's message is a dead letter, never published.
func TestSealedOutbox(t *testing.T) {
	sealtest.Each(t, func(t *testing.T, d driver.Driver, dir string) {
		ctx := context.Background()
		s := sealtest.New()
		plainOb, err := outbox.New(d, outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ob, err := outbox.New(d, outbox.Config{Sealer: s})
		if err != nil {
			t.Fatal(err)
		}
		before := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "t.before", Key: "k", Payload: []byte(`{"n":0}`)}
		enqueue(t, d, plainOb, before)
		sealed := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "t.sealed", Key: "k",
			Payload: []byte(`{"card":"` + sealMarker + `"}`), Headers: map[string]string{"x-card": sealMarker}}
		doomed := outbox.Message{ID: outbox.NewID(), Tenant: "gone", Type: "t.doomed",
			Payload: []byte(`{"card":"` + sealMarker + `"}`)}
		enqueue(t, d, ob, sealed, doomed)

		if n := sealtest.Absent(t, d, dir, sealMarker, "idem_outbox"); d.Dialect() == "postgres" && n != 3 {
			t.Fatalf("read %d outbox rows, want 3", n)
		}
		var nSealed int
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_outbox WHERE sealed AND headers IS NULL`).Scan(&nSealed); err != nil || nSealed != 2 {
			t.Fatalf("sealed rows %d (%v), want 2", nSealed, err)
		}

		// A relay without the Sealer publishes the plaintext row and
		// fails the sealed one: it holds its key, nothing published.
		var noKey capture
		relayUntil(t, d, outbox.RelayConfig{Publisher: &noKey}, func() bool {
			var failed int
			_ = d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_outbox WHERE attempts > 0`).Scan(&failed)
			return failed == 2
		})
		if got := noKey.got(); len(got) != 1 || got[0].ID != before.ID {
			t.Fatalf("a relay without the Sealer published %+v; want the plaintext row only", got)
		}
		// Listed and opened, the sealed row in plaintext.
		events, err := listed(t, ob, d, 2)
		if err != nil || len(events) != 2 || !strings.Contains(string(events[1].Payload), sealMarker) {
			t.Fatalf("list: %v %+v", err, events)
		}

		s.Forget("gone")
		var pub capture
		relayUntil(t, d, outbox.RelayConfig{Publisher: &pub, Sealer: s}, func() bool {
			st, err := ob.Stats(ctx)
			return err == nil && st.Unsent == 0 && st.Dead == 1
		})
		got := pub.got()
		if len(got) != 1 || got[0].ID != sealed.ID || string(got[0].Payload) != string(sealed.Payload) ||
			got[0].Headers["x-card"] != sealMarker {
			t.Fatalf("published %+v; want the sealed message in plaintext", got)
		}
		dead, _, err := ob.Dead(ctx, outbox.DeadQuery{})
		if !errors.Is(err, seal.ErrForgotten) || dead != nil {
			t.Fatalf("dead letters of a forgotten tenant: %v %+v", err, dead)
		}
		var lastErr string
		if err := d.Reader().QueryRow(ctx, `SELECT last_error FROM idem_outbox WHERE dead_at IS NOT NULL`).Scan(&lastErr); err != nil ||
			!strings.Contains(lastErr, "forgotten") {
			t.Fatalf("dead letter's error %q (%v)", lastErr, err)
		}
		if _, _, err := plainOb.List(ctx, d.Reader(), outbox.ListQuery{Tenant: "acme"}); !errors.Is(err, idem.ErrNoSealer) {
			t.Fatalf("list without a Sealer: %v; want idem.ErrNoSealer", err)
		}
	})
}

// A sealed message moved to another row fails to open.
func TestSealedOutboxSwapped(t *testing.T) {
	sealtest.Each(t, func(t *testing.T, d driver.Driver, _ string) {
		ctx := context.Background()
		ob, err := outbox.New(d, outbox.Config{Sealer: sealtest.New()})
		if err != nil {
			t.Fatal(err)
		}
		a := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "t", Payload: []byte(`{"a":1}`)}
		b := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "t", Payload: []byte(`{"b":1}`)}
		enqueue(t, d, ob, a, b)
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		q := `UPDATE idem_outbox SET payload = (SELECT payload FROM idem_outbox WHERE id = $1) WHERE id = $2`
		if d.Dialect() == "postgres" {
			q = `UPDATE idem_outbox SET payload = (SELECT payload FROM idem_outbox WHERE id = $1::uuid) WHERE id = $2::uuid`
		}
		if _, err := tx.Exec(ctx, q, b.ID, a.ID); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := listed(t, ob, d, 1); !errors.Is(err, seal.ErrAuthentication) {
			t.Fatalf("list of a swapped row: %v; want seal.ErrAuthentication", err)
		}
	})
}
