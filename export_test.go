package idem

import (
	"context"

	"github.com/idemhq/idem/driver"
)

// SetJoinedHook makes k call f each time a copy joins an in-process twin's
// flight, just before it waits: a test learns that a copy is waiting
// without sleeping. Call it before k is used.
func SetJoinedHook(k *Keeper, f func(Key)) { k.testHooks.joined = f }

// SetBatchHook makes b call f with the keys of each transaction a batch
// begins, before it begins it: a test counts transactions and sees which
// requests shared one. Call it before b is used.
func SetBatchHook[T any](b *Batcher[T], f func([]Key)) { b.testHooks.attempt = f }

// SetCommitHook makes b commit each batch's transaction with f instead of
// tx.Commit: a test makes a commit fail after it happened. Call it before
// b is used.
func SetCommitHook[T any](b *Batcher[T], f func(ctx context.Context, tx driver.TxCloser) error) {
	b.testHooks.commit = f
}

// SetEndedHook makes b call f each time a batch has freed its place
// among the Concurrency batches, or handed it on to what waits. Call it
// before b is used.
func SetEndedHook[T any](b *Batcher[T], f func()) { b.testHooks.ended = f }

// SetQueuedHook makes b call f with each request's key once it waits in
// the queue for a batch. Call it before b is used.
func SetQueuedHook[T any](b *Batcher[T], f func(Key)) { b.testHooks.queued = f }

// The read-first policy's window and share (read.go).
const (
	ReadWindow = readWindow
	ReadWorth  = readWorth
)
