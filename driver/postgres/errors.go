package postgres

import (
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/driver"
)

// SQLSTATE codes this driver maps. See the PostgreSQL manual, appendix A.
const (
	codeUniqueViolation      = "23505"
	codeLockNotAvailable     = "55P03"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
	codeTooManyConnections   = "53300"
	codeReadOnlyTransaction  = "25006"
	// A statement canceled by statement_timeout or a context's deadline,
	// and sessions the server ended for idling (in a transaction or not).
	codeQueryCanceled      = "57014"
	codeIdleInTransaction  = "25P03"
	codeIdleSessionTimeout = "57P05"
	// codeImmutable is raised by idem's triggers on append-only tables.
	codeImmutable = "IDM01"
	// codeClaimMissing is raised by idem_expect: an outcome or a release
	// found no claim of its transaction's.
	codeClaimMissing = "IDM02"
	// codeClaimNotFirst is raised by sqlClaimCheck.
	codeClaimNotFirst = "IDM03"
	// codeTombstoned is raised by idem_claimable: a claim inserted a key
	// that the janitor had just moved to its tombstone.
	codeTombstoned = "IDM04"
)

// mapErr wraps err with the driver sentinel it corresponds to. The original
// error stays reachable with errors.As.
func mapErr(err error) error {
	if m, ok := driver.MapCommon(err, pgx.ErrNoRows); ok {
		return m
	}
	if ce, ok := errors.AsType[*pgconn.ConnectError](err); ok && err == error(ce) {
		err = refusedByPooler(causeFirst(ce))
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeUniqueViolation:
			return fmt.Errorf("%w: %w", driver.ErrUniqueViolation, err)
		case codeLockNotAvailable:
			return fmt.Errorf("%w: %w", driver.ErrLockTimeout, err)
		case codeSerializationFailure, codeDeadlockDetected:
			return fmt.Errorf("%w: %w", driver.ErrSerialization, err)
		case codeTooManyConnections:
			return fmt.Errorf("%w: %w: %w", driver.ErrUnavailable, driver.ErrTooManyConnections, err)
		case codeQueryCanceled:
			return fmt.Errorf("%w: %w", driver.ErrStatementTimeout, err)
		case codeReadOnlyTransaction:
			return fmt.Errorf("%w: %w", driver.ErrReadOnlyTransaction, err)
		case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow,
			codeIdleInTransaction, codeIdleSessionTimeout:
			return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
		case codeImmutable:
			return fmt.Errorf("%w: %w", driver.ErrImmutable, err)
		case codeClaimMissing:
			return fmt.Errorf("%w: %w", driver.ErrNotFound, err)
		case codeClaimNotFirst:
			return fmt.Errorf("%w: %w", driver.ErrClaimNotFirst, err)
		case codeTombstoned:
			return fmt.Errorf("%w: %w", driver.ErrTombstoned, err)
		}
		if len(pgErr.Code) == 5 && pgErr.Code[:2] == "08" { // connection exception class
			return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
		}
		return err
	}
	if errors.Is(err, pgconn.ErrReadOnlyConnection) {
		return fmt.Errorf("%w: %w: %w", driver.ErrUnavailable, driver.ErrReadOnlyServer, err)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	return err
}

// commitErr maps the error of a COMMIT that was sent. The server's own
// refusal (an SQLSTATE) and database/sql's refusals before sending
// (ErrBadConn, ErrTxDone) leave nothing committed; any other failure came
// while the answer was awaited, so the transaction may have committed:
// driver.ErrCommitUnknown, with the original kept. pgx's SafeToRetry is no
// guide here: a read that fails after COMMIT went out surfaces as "conn
// closed", which it marks safe to retry. mapped maps the definite ones
// (mapErr, mapStdErr).
func commitErr(err error, mapped func(error) error) error {
	if err == nil {
		return nil
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) || errors.Is(err, sql.ErrTxDone) || errors.Is(err, sqldriver.ErrBadConn) {
		return mapped(err)
	}
	return fmt.Errorf("%w: %w", driver.ErrCommitUnknown, err)
}
