package postgres

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testpg"
)

// A statement whose context ends as it finishes leaves a cancel request
// on its way: however late the server takes it, it cancels no statement
// that runs after on the connection. Here the server takes the request
// 300 ms after it was sent (a loaded server's postmaster): pgx's own
// handler had let the next statement run once the first ended, and the
// request canceled it. A request the server has not taken within cancelGrace
// may cancel anything later: its connection is not used again.
func TestLateCancelCancelsNothingElse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		late    time.Duration
		newConn bool
	}{{300 * time.Millisecond, false}, {cancelGrace + 500*time.Millisecond, true}} {
		ctx := context.Background()
		cfg := Config{URL: testpg.URL(t)}.withDefaults()
		pcfg, err := pgxpool.ParseConfig(cfg.URL)
		if err != nil {
			t.Fatal(err)
		}
		pcfg.MaxConns = 1
		applyLimits(pcfg, cfg)
		var slow atomic.Bool // the next dial is a cancel request's, and late
		dial := pcfg.ConnConfig.DialFunc
		pcfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil || !slow.CompareAndSwap(true, false) {
				return conn, err
			}
			return &lateWrites{Conn: conn, delay: c.late, written: make(chan struct{})}, nil
		}
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var pid, pidAfter int32
		if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		slow.Store(true)

		// The statement ends 220 ms after its context, long enough for the
		// cancel request to be sent on a loaded machine; the server takes
		// it after the statement ended.
		short, cancel := context.WithTimeout(ctx, 80*time.Millisecond)
		_, _ = pool.Exec(short, `SELECT pg_sleep(0.3)`)
		cancel()
		start := time.Now()
		err = pool.QueryRow(ctx, `SELECT pg_backend_pid() FROM pg_sleep(0.5)`).Scan(&pidAfter)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "57014" {
			t.Fatalf("late by %s: a statement of nobody's canceled, %s after the one canceled: %v", c.late, time.Since(start), err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if (pidAfter != pid) != c.newConn {
			t.Errorf("late by %s: backend %d, then %d; want a new connection: %v", c.late, pid, pidAfter, c.newConn)
		}
	}
}

// lateWrites is a connection whose writes reach the server delay after
// they were made, even once it is closed: a server slow to take them.
type lateWrites struct {
	net.Conn
	delay   time.Duration
	written chan struct{}
}

func (c *lateWrites) Write(b []byte) (int, error) {
	b = slices.Clone(b)
	time.AfterFunc(c.delay, func() {
		defer close(c.written)
		_, _ = c.Conn.Write(b)
	})
	return len(b), nil
}

// SetDeadline bounds the reads only: the late write still goes.
func (c *lateWrites) SetDeadline(t time.Time) error { return c.Conn.SetReadDeadline(t) }

// Close closes the connection once its late write went.
func (c *lateWrites) Close() error {
	go func() {
		<-c.written
		_ = c.Conn.Close()
	}()
	return nil
}
