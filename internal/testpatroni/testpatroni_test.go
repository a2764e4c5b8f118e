package testpatroni

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The script's own promise, under synchronous mode: rows committed before
// the primary's node is lost are on the promoted standby, the multi-host
// URL reaches the new primary, and the lost node comes back as the
// standby, so a second failover (back to the first node) loses nothing
// either.
func TestKillPrimary(t *testing.T) {
	t.Parallel()
	c := Start(t, Config{Sync: true})
	ctx := context.Background()
	exec := func(sql string, args ...any) int {
		t.Helper()
		var conn *pgx.Conn
		var err error
		// The URL's first host may be a node still starting after a
		// failover: pgx tries the next one.
		deadline := time.Now().Add(30 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			conn, err = pgx.Connect(cctx, c.URL)
			cancel()
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, c.Logs())
		}
		defer conn.Close(ctx)
		var n int
		if args == nil {
			_, err = conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
		} else {
			err = conn.QueryRow(ctx, sql, args...).Scan(&n)
		}
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	exec("CREATE TABLE rows_kept (i int)")
	first := c.Primary(t)
	for round := 1; round <= 2; round++ {
		exec("INSERT INTO rows_kept SELECT generate_series(1, 100)")
		before := c.Primary(t)
		out := c.KillPrimary(t)
		after := c.Primary(t)
		if after == before {
			t.Fatalf("round %d: primary still %s after kill-primary: %s", round, after, out)
		}
		if n := exec("SELECT count(*) FROM rows_kept", pgx.QueryExecModeExec); n != 100*round {
			t.Fatalf("round %d: %d rows on the promoted node, %d committed", round, n, 100*round)
		}
	}
	if c.Primary(t) != first {
		t.Fatalf("after two failovers the primary is %s, not the first node %s again", c.Primary(t), first)
	}
}
