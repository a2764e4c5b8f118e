package idemtest_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/idemtest"
)

// TestKillIdemRelay is the ready path for users whose relay is the idem
// binary: build it, and kill `idem relay` after it published and before it
// marked the rows sent.
func TestKillIdemRelay(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "idem")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/idemhq/idem/cmd/idem").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbURL := idemtest.Postgres(t)
	natsURL, messages := idemtest.NATS(t)
	idemtest.KillRelay(t, idemtest.RelayCrash{
		Command:   idemtest.IdemRelay(idemtest.IdemRelayParams{Bin: bin, DB: dbURL, Publish: natsURL}),
		Failpoint: idemtest.AfterPublish,
		DB:        dbURL,
		Messages:  messages,
		Want:      enqueue(t, dbURL, 5),
	})
	if n := len(messages()); n != 5 {
		t.Errorf("the broker holds %d messages, want 5", n)
	}
}
