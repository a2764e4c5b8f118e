package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/storage"
)

// A SIGTERM while the janitor is inside its DELETE (held there by a
// failpoint that then lets it go on) waits for the janitor before the
// driver closes: the batch commits and the process exits cleanly. The
// expired records are gone.
func TestShutdownWaitsForTheJanitor(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		plain, db := serveDB(t, dialect, nil)
		account(t, plain.URL, "a", "EUR")
		account(t, plain.URL, "b", "EUR")
		plain.signal(syscall.SIGTERM)
		if err := plain.wait(30 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
		expired := `UPDATE idem_keys SET expires_at = 0`
		if dialect == "postgres" {
			expired = `UPDATE idem_keys SET expires_at = to_timestamp(0)`
		}
		if n := idemKeys(t, db, expired); n == 0 {
			t.Fatal("no idempotency keys stored to expire")
		}

		p := start(t, []string{"IDEM_FAILPOINT=janitor.before_delete", "IDEM_FAILPOINT_HOLD=2s", "IDEM_FAILPOINT_THEN=continue"},
			"serve", "--addr", "127.0.0.1:0", "--db", db)
		waitFor(t, func() bool { return strings.Contains(p.Stderr(), "failpoint: janitor.before_delete\n") })
		p.signal(syscall.SIGTERM)
		if err := p.wait(30 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit during the janitor's batch: %v\n%s", err, p.Stderr())
		}
		if stderr := p.Stderr(); !strings.Contains(stderr, "going on") || strings.Contains(stderr, "janitor\"") {
			t.Fatalf("the janitor did not finish before the exit, or failed:\n%s", stderr)
		}
		if n := idemKeys(t, db, ""); n != 0 {
			t.Fatalf("%d expired keys left: the process exited under the janitor's DELETE", n)
		}
	})
}

// idemKeys runs update, when set, and returns how many idempotency keys db
// holds.
func idemKeys(t *testing.T, db, update string) int {
	t.Helper()
	ctx := context.Background()
	d, err := storage.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if update != "" {
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, update); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
