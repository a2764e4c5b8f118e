package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/testpg"
)

// A commit whose wait for a synchronous standby that does not exist is
// cut short by the caller's deadline or cancellation is committed on the
// server but returned as ErrUnreplicated, counted, and the connection
// serves on. (The server's statement_timeout does not end that wait: it
// is lifted before the commit.)
func TestUnreplicatedCommit(t *testing.T) {
	t.Parallel()
	pg := testpg.NewCluster(t)
	pg.Exec(t, `CREATE TABLE deadline (id int PRIMARY KEY)`, `CREATE TABLE cancel (id int PRIMARY KEY)`)
	pg.RequireStandby(t, true)
	for _, c := range []struct {
		table string
		ctx   func() (context.Context, context.CancelFunc)
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			return ctx, cancel
		}},
	} {
		t.Run(c.table, func(t *testing.T) {
			t.Parallel()
			// A statement timeout shorter than the wait changes nothing.
			d, err := Open(context.Background(), Config{URL: pg.URL, MaxConns: 1, StatementTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			ctx, cancel := c.ctx()
			defer cancel()
			tx, err := d.Begin(ctx, driver.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+c.table+` VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			err = tx.Commit(ctx)
			if !errors.Is(err, driver.ErrUnreplicated) || driver.IsRetryable(err) {
				t.Fatalf("commit without its standby: %v", err)
			}
			if got := d.PoolStats().Unreplicated; got != 1 {
				t.Fatalf("unreplicated commits counted: %d, want 1", got)
			}
			// Committed on this server all the same, and the one
			// connection serves the next statement. On a loaded machine
			// that statement may itself outrun the short timeout: the
			// connection serving a retry shows the same.
			var n int
			for try := 0; ; try++ {
				err = d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM `+c.table).Scan(&n)
				if !errors.Is(err, driver.ErrStatementTimeout) || try == 4 {
					break
				}
			}
			if err != nil || n != 1 {
				t.Fatalf("rows after the unreplicated commit: %d, %v", n, err)
			}
		})
	}
}

// Migrations run unbounded whatever StatementTimeout says, and the pool's
// connections stay bounded.
func TestMigrateUnbounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// target_session_attrs=any: the read-write check at connect is a
	// statement too, and 1ms is shorter than it may take.
	d, err := Open(ctx, Config{URL: testpg.URL(t) + "&target_session_attrs=any", SearchPath: testpg.Schema(t), MaxConns: 1,
		StatementTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("migrate under a 1ms statement timeout: %v", err)
	}
	// 57014 whatever its message: on a loaded server a timeout that fires
	// as the previous statement ends cancels this one "due to user
	// request".
	_, err = d.Reader().Exec(ctx, `SELECT pg_sleep(0.2)`)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !errors.Is(err, driver.ErrStatementTimeout) || !ok || pgErr.Code != codeQueryCanceled {
		t.Fatalf("a statement longer than the timeout after migrating: %v", err)
	}
}

// A read-only driver (the operator commands': keys, ledger) on the URL a
// serving process uses to find its primary, target_session_attrs=
// read-write: it connects to the primary and reads, although its sessions
// are read-only by default (pgx's read-write check, which asks
// transaction_read_only, refused every host).
func TestReadOnlyOnReadWriteURL(t *testing.T) {
	t.Parallel()
	url := testpg.URL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	d, err := Open(context.Background(), Config{URL: url + sep + "target_session_attrs=read-write", ReadOnly: true, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var readOnly string
	if err := d.Reader().QueryRow(context.Background(), `SHOW transaction_read_only`).Scan(&readOnly); err != nil || readOnly != "on" {
		t.Fatalf("read-only driver on a read-write URL: transaction_read_only %q, %v", readOnly, err)
	}
}
