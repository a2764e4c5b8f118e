package leakcheck_test

import (
	"testing"

	"github.com/idemhq/idem/internal/leakcheck"
)

type runner int

func (r runner) Run() int { return int(r) }

func TestAfter(t *testing.T) {
	if got := leakcheck.After(0); got != 0 {
		t.Fatalf("After(0) with no goroutine left = %d, want 0", got)
	}
	if got := leakcheck.Wrap(runner(0)).Run(); got != 0 {
		t.Fatalf("Wrap(passing run).Run() = %d, want 0", got)
	}
	if got := leakcheck.Wrap(runner(2)).Run(); got != 2 {
		t.Fatalf("Wrap(failed run).Run() = %d, want the run's own 2", got)
	}

	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		<-stop
	}()
	defer func() {
		close(stop)
		<-stopped
	}()
	if got := leakcheck.After(0); got != 1 {
		t.Fatalf("After(0) with a goroutine left = %d, want 1", got)
	}
	if got := leakcheck.After(3); got != 3 {
		t.Fatalf("After(3) = %d, want the run's own 3", got)
	}
}
