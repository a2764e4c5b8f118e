package postgres

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/netfault"
	"github.com/idemhq/idem/internal/testpg"
)

// A COMMIT whose answer is lost may have committed: the driver says so
// (ErrCommitUnknown), not that the database was unavailable, which
// promises that nothing was stored. The row is there.
func TestCommitAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testpg.Schema(t)
	direct, err := Open(ctx, Config{URL: testpg.URL(t), SearchPath: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if _, err := direct.Pool().Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testpg.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	q := u.Query()
	q.Set("sslmode", "disable") // the proxy reads the COMMIT in the clear
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	viaPool, err := Open(ctx, Config{URL: u.String(), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer viaPool.Close()
	db := stdlib.OpenDB(*viaPool.Pool().Config().ConnConfig.Copy())
	defer db.Close()
	viaDB, err := Open(ctx, Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer viaDB.Close()

	// pgx's stdlib sends its COMMIT in lower case.
	for id, via := range []struct {
		d      *Driver
		commit string
	}{{viaPool, "COMMIT"}, {viaDB, "commit"}} {
		d := via.d
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, id); err != nil {
			t.Fatal(err)
		}
		proxy.DropAnswer([]byte(via.commit))
		err = tx.Commit(ctx)
		if !errors.Is(err, driver.ErrCommitUnknown) || errors.Is(err, driver.ErrUnavailable) || driver.IsRetryable(err) {
			t.Fatalf("driver %d: commit with its answer lost: %v; want ErrCommitUnknown alone", id, err)
		}
		var n int
		if err := direct.Pool().QueryRow(ctx, `SELECT count(*) FROM t WHERE id = $1`, id).Scan(&n); err != nil || n != 1 {
			t.Fatalf("driver %d: %d rows (%v), want the commit's 1", id, n, err)
		}
	}

	// A commit the server refuses is no unknown: nothing was committed.
	tx, err := viaPool.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (0)`); !errors.Is(err, driver.ErrUniqueViolation) {
		t.Fatalf("duplicate insert: %v", err)
	}
	if err := tx.Commit(ctx); err == nil || errors.Is(err, driver.ErrCommitUnknown) {
		t.Fatalf("commit of an aborted transaction: %v; want a definite failure", err)
	}
}
