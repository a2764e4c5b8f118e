// Package idemtest is the test kit for services built on idem: the two
// tests that say a retried request is safe, each one call.
//
// The first test sends the same request twice (SendTwice, DoTwice) and many
// times at once (SendConcurrently, DoConcurrently) and checks what a retry
// must never change: the side effect happened once (a counter the caller
// supplies: rows in a table, messages on a broker), every copy got the same
// answer, and the copies after the first were marked as replays.
//
// The second test kills the relay that publishes the outbox at a chosen
// failpoint — after the commit but before the publish, or after the publish
// but before the row is marked sent — restarts it, and checks that every
// message reached the broker exactly once (KillRelay).
//
// Both need real components, and the kit gives them in one call each: a
// throwaway PostgreSQL schema with idem's tables (Postgres, stopped by Main)
// and an embedded NATS JetStream server whose stored messages can be read
// back (NATS).
//
// Assertions report through TB, the subset of testing.TB the kit needs, so
// that the kit's own tests can show each helper failing on a handler or a
// relay that is not idempotent.
package idemtest

import (
	"time"
)

// TB is the part of testing.TB the assertions use. *testing.T and
// *testing.B satisfy it.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
}

// DefaultTimeout bounds each wait of KillRelay when RelayCrash.Timeout is
// zero.
const DefaultTimeout = 30 * time.Second
