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
// begins, before it begins it (for a batch's first transaction, those in
// it so far: more may join while it begins): a test counts transactions
// and sees which requests shared one. Call it before b is used.
func SetBatchHook[T any](b *Batcher[T], f func([]Key)) { b.testHooks.attempt = f }

// SetCommitHook makes b call f in place of each batch's commit (its
// outcomes' statement and COMMIT), which f is given: a test makes a
// commit fail after it happened. Call it before b is used.
func SetCommitHook[T any](b *Batcher[T], f func(ctx context.Context, commit func(context.Context) error) error) {
	b.testHooks.commit = f
}

// SetQueuedHook makes b call f with each request's key once it waits in
// its scope's queue for a batch. Call it before b is used.
func SetQueuedHook[T any](b *Batcher[T], f func(Key)) { b.testHooks.queued = f }

// SetBatchJoinedHook makes b call f with each request's key once it joined a
// batch that had not begun. Call it before b is used.
func SetBatchJoinedHook[T any](b *Batcher[T], f func(Key)) { b.testHooks.joined = f }

// The bounds of the fast path's coalesced reads (read.go).
const (
	ReadMaxBatch = readMaxBatch
	ReadMaxTrips = readMaxTrips
	ReadWindow   = readWindow
	ReadWorth    = readWorth
)

// SetReadHooks makes k call queued with the key of each fast-path read
// that waits for a batch, once it waits, and sent with the keys of each
// round trip of reads, before it is sent. Either may be nil. Call it
// before k is used.
func SetReadHooks(k *Keeper, queued func(Key), sent func([]Key)) {
	if queued != nil {
		k.reads.testHooks.queued = func(id driver.KeyID) { queued(keyOf(id)) }
	}
	if sent != nil {
		k.reads.testHooks.sent = func(ids []driver.KeyID) {
			keys := make([]Key, len(ids))
			for i, id := range ids {
				keys[i] = keyOf(id)
			}
			sent(keys)
		}
	}
}

// SetReadGaveUpHook makes k call f with the key of each waiting fast-path
// read whose caller gave up, before the read leaves the queue or learns it
// was handed a round trip. Call it before the reads it is for begin.
func SetReadGaveUpHook(k *Keeper, f func(Key)) {
	k.reads.testHooks.gaveUp = func(id driver.KeyID) { f(keyOf(id)) }
}

func keyOf(id driver.KeyID) Key { return Key{Scope: id.Scope, Operation: id.Operation, Key: id.Key} }

// SetReadQueueBound sets how many fast-path reads may wait for a round
// trip (readMaxQueued in production). Call it before k is used.
func SetReadQueueBound(k *Keeper, n int) { k.reads.adm.maxQueued = n }

// GateWaiting is the number of scope's batches waiting for a slot of b's
// gate.
func GateWaiting[T any](b *Batcher[T], scope string) int { return b.gate.Waiting(scope) }

// ReadsAtRest reports whether k's coalesced reads have no round trip in
// flight and none waiting.
func ReadsAtRest(k *Keeper) bool {
	k.reads.mu.Lock()
	defer k.reads.mu.Unlock()
	return k.reads.adm.running == 0 && k.reads.adm.waiting == 0
}
