package idemgrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/sealtest"
)

// TestAnswerForgotten: a resend whose stored reply belongs to a forgotten
// tenant is FailedPrecondition ANSWER_FORGOTTEN; the handler does not run
// again.
func TestAnswerForgotten(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, sqlCreate); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		s := sealtest.New()
		e := serveWith(t, d, idem.Config{Sealer: s}, idemgrpc.Config{})
		first := e.call(t, 100, "k1")
		if first.st.Code() != codes.OK {
			t.Fatalf("first: %v", first.st)
		}
		if again := e.call(t, 100, "k1"); again.st.Code() != codes.OK || !again.replayed() {
			t.Fatalf("sealed resend: %v replayed=%v", again.st, again.replayed())
		}
		s.Forget(idem.DefaultTenant)
		gone := e.call(t, 100, "k1")
		if gone.st.Code() != codes.FailedPrecondition {
			t.Fatalf("resend of a forgotten tenant: %v; want FailedPrecondition", gone.st)
		}
		wantDetail(t, gone.st, idemgrpc.ReasonAnswerForgotten, false)
		if n := e.rows(t); n != 1 || e.pay.calls.Load() != 1 {
			t.Fatalf("%d rows, %d handler calls; want 1 and 1", n, e.pay.calls.Load())
		}
	})
}
