package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// connectFailure is a failed connection told cause first. pgconn's
// ConnectError lists every attempt in order, and with sslmode=prefer
// (libpq's default, and pgx's) the first attempt is TLS, which a server
// without TLS refuses: the line an operator read first was "tls error:
// server refused TLS connection", and the cause ("password authentication
// failed", "database … does not exist") came after it. Here the attempt
// that reached the server leads; a TLS refusal followed by a plaintext
// attempt to the same address is left out (prefer expects it); any other
// attempt (another host of a multi-host URL) follows, each once. Unwrap keeps the
// ConnectError, so that errors.As still finds the *pgconn.PgError.
type connectFailure struct {
	err *pgconn.ConnectError
	msg string
}

func (e *connectFailure) Error() string { return e.msg }
func (e *connectFailure) Unwrap() error { return e.err }

// causeFirst returns ce told cause first, or ce when it holds one attempt.
func causeFirst(ce *pgconn.ConnectError) error {
	var attempts []error
	if j, ok := errors.Unwrap(ce).(interface{ Unwrap() []error }); ok {
		attempts = j.Unwrap()
	}
	if len(attempts) < 2 {
		return ce
	}
	lead := -1
	for i, a := range attempts {
		if errors.As(a, new(*pgconn.PgError)) {
			lead = i
			break
		}
	}
	if lead < 0 {
		lead = len(attempts) - 1
	}
	var rest []string
	for i, a := range attempts {
		if i == lead || (refusedTLS(a) && i+1 < len(attempts) && sameAddress(a, attempts[i+1])) ||
			a.Error() == attempts[lead].Error() || slices.Contains(rest, a.Error()) {
			continue
		}
		rest = append(rest, a.Error())
	}
	who := "failed to connect"
	if ce.Config != nil {
		who = fmt.Sprintf("failed to connect to `user=%s database=%s`", ce.Config.User, ce.Config.Database)
	}
	msg := who + ": " + attempts[lead].Error()
	if len(rest) > 0 {
		msg += "\n\tother attempts:\n\t" + strings.Join(rest, "\n\t")
	}
	return &connectFailure{err: ce, msg: msg}
}

// refusedTLS is an attempt that found a server without TLS.
func refusedTLS(err error) bool {
	return strings.Contains(err.Error(), "server refused TLS connection")
}

// sameAddress tells whether two attempts went to one address: pgconn
// writes each as "address (host): cause".
func sameAddress(a, b error) bool {
	addrA, _, okA := strings.Cut(a.Error(), ": ")
	addrB, _, okB := strings.Cut(b.Error(), ": ")
	return okA && okB && addrA == addrB
}

// poolerRefusal is a connection a pooler refused for a startup parameter
// it does not know (PgBouncer refuses all but a few): the session settings
// idem sends at connect, when the URL does not say a pooler is there.
type poolerRefusal struct{ err error }

func (e *poolerRefusal) Error() string {
	return e.err.Error() + " (a connection pooler such as PgBouncer refuses the session settings idem sends at connect: add " +
		PoolerParam + "=" + PoolerTransaction + " to the URL, and idem sends them with each transaction instead; " +
		"ignore_startup_parameters would drop them, deadlines included)"
}
func (e *poolerRefusal) Unwrap() error { return e.err }

// refusedByPooler wraps err when a pooler refused a startup parameter.
func refusedByPooler(err error) error {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && strings.HasPrefix(pgErr.Message, "unsupported startup parameter") {
		return &poolerRefusal{err}
	}
	return err
}
