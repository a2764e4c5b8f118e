// Package idem makes retried work happen once.
//
// The dangerous request is not the first one: it is the same request
// arriving again — a provider redelivering a webhook, a queue redelivering a
// message, a client that never heard the answer. The Keeper runs an
// operation's work in one database transaction together with the claim of
// its idempotency key and the storage of its outcome:
//
//   - the claim is an INSERT under a unique constraint, so the database, not
//     a check in Go, decides which of two concurrent copies does the work;
//   - the work, its outgoing messages (package outbox) and the stored outcome
//     commit together, or not at all;
//   - a copy that arrives later gets the stored outcome back, marked as a
//     replay, so its sender can stop; a copy whose request differs gets
//     ErrKeyReused; a copy that arrives while the first still runs waits,
//     bounded, then replays or gets ErrInFlight;
//   - business failures are outcomes and are stored; an error returned by
//     the work is transient: everything rolls back, nothing is stored, and a
//     retry does the work;
//   - a panic in the work is a bug, not an outcome: it rolls back like an
//     error, is logged and returned as a *PanicError, and leaves the key
//     free for the retry.
//
// A Batcher does the same for many requests at once ("group commit"): the
// first arrivals of the moment share one transaction, with one statement
// claiming all their keys and one storing all their answers, and each is
// still all-or-nothing and answered alone. It pays when requests arrive
// faster than the database commits them one by one.
//
// Storage is pluggable through package driver: driver/postgres for
// production, driver/sqlite for the embedded default.
//
// Package idemhttp puts the Keeper in front of net/http handlers, and
// package idemtest checks a handler built on it in one line per test
// (SendTwice, SendConcurrently, DoTwice, KillRelay). docs/architecture.md
// draws the transaction boundary; docs/keys.md says how to choose the key.
package idem
