package postgres

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/testpg"
)

// A connection the server turns down is told cause first: with libpq's
// default sslmode (prefer) against a server without TLS, pgx's error
// began with "tls error: server refused TLS connection" and the cause
// came on the next line. The cause now leads, the expected refusal is
// left out, and the error still classifies: an unknown database or role is
// not an outage, a port where nothing listens is.
func TestConnectErrorLeadsWithCause(t *testing.T) {
	t.Parallel()
	base, err := url.Parse(testpg.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := base.Query()
	q.Del("sslmode") // prefer: TLS first, then plaintext
	base.RawQuery = q.Encode()
	withPath := func(user, db string) string {
		u := *base
		u.User = url.User(user)
		u.Path = "/" + db
		return u.String()
	}
	closed := *base
	closed.Host = "127.0.0.1:1"
	for _, c := range []struct {
		name, url, cause string
		unavailable      bool
	}{
		{"no such database", withPath(base.User.Username(), "idem_no_such_db"), `database "idem_no_such_db" does not exist`, false},
		{"no such role", withPath("idem_no_such_role", "postgres"), `role "idem_no_such_role" does not exist`, false},
		{"nothing listening", closed.String(), "connection refused", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, err := Open(context.Background(), Config{URL: c.url, MaxConns: 1})
			if err == nil {
				_, err = d.MigrationStatus(context.Background())
				d.Close()
			}
			if err == nil {
				t.Fatal("connected")
			}
			first, _, _ := strings.Cut(err.Error(), "\n")
			if !strings.Contains(first, c.cause) || strings.Contains(err.Error(), "server refused TLS") {
				t.Errorf("error %q: want %q on its first line, and no TLS refusal", err, c.cause)
			}
			if got := errors.Is(err, driver.ErrUnavailable); got != c.unavailable {
				t.Errorf("error %q: unavailable %v, want %v", err, got, c.unavailable)
			}
			if !c.unavailable && !errors.As(err, new(*pgconn.PgError)) {
				t.Errorf("error %q: the server's *pgconn.PgError is lost", err)
			}
		})
	}
}
