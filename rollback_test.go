package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/drivertest"
)

// Requests abandoned mid-transaction (the caller's context canceled while
// the work runs) are rolled back on a context of the driver's own: the
// ROLLBACK reaches the server, the connection goes back to the pool clean,
// and the pool opens no new connection for the requests that follow.
// Nothing was stored, and every key is free for its retry. Postgres: the
// pool whose connections are counted.
func TestCanceledRequestsKeepTheirConnections(t *testing.T) {
	d := drivertest.Open(t, "postgres")
	pool := d.(*postgres.Driver).Pool()
	setup(t, d)
	k := newKeeper(t, d, idem.Config{})

	const workers, perWorker = 4, 50
	abandon := func(key string) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := k.Do(ctx, req(key, `{}`), func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ($1, 'abandoned')`, key); err != nil {
				return idem.Outcome{}, err
			}
			cancel() // the client goes away while its transaction is open
			return idem.Outcome{}, ctx.Err()
		})
		return err
	}
	run := func(round string, n int) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range n {
					if err := abandon(fmt.Sprintf("%s-%d-%d", round, w, i)); !errors.Is(err, context.Canceled) {
						t.Errorf("abandoned request: %v, want context.Canceled", err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run("warm", 1) // the pool opens what the workers need at once
	before := pool.Stat().NewConnsCount()
	run("cut", perWorker)
	if opened := pool.Stat().NewConnsCount() - before; opened > workers {
		t.Fatalf("the pool opened %d connections for %d abandoned requests; want at most %d (none, but for timing)",
			opened, workers*perWorker, workers)
	}
	if n := countRows(t, d, "biz"); n != 0 {
		t.Fatalf("%d biz rows committed by abandoned requests", n)
	}
	var runs atomic.Int64
	if res, err := k.Do(context.Background(), req("cut-0-0", `{}`), insertWork(&runs, 201, `{}`)); err != nil || res.Replayed || runs.Load() != 1 {
		t.Fatalf("an abandoned request's retry: %v %+v, runs %d; want it to run", err, res, runs.Load())
	}
}
