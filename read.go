package idem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/benchknob"
)

// The fast path's reads, coalesced where a read is a round trip
// (driver.KeyReadBatcher): a read that finds none in flight goes at once,
// alone; the others wait, and the oldest waiting read's goroutine sends up
// to readMaxBatch of them when a round trip ends, or at once when
// readWorthATrip wait and fewer than readMaxTrips are in flight. Each read
// is answered once, by the round trip that carried it.
// docs/architecture.md, "Coalesced reads"; the constants' figures:
// docs/architecture.md, "The hot path's mechanisms".
const (
	// readMaxBatch bounds the reads one round trip carries.
	readMaxBatch = 32
	// readWorthATrip is how many waiting reads go at once rather than wait
	// for a round trip in flight to end.
	readWorthATrip = 8
	// readMaxTrips bounds the round trips in flight, each on a connection
	// of its own.
	readMaxTrips = 2
	// readMaxQueued bounds the reads waiting for a round trip. A read past
	// it is not made: its request goes on to its claim, which answers a
	// replay as well, in its transaction.
	readMaxQueued = 1000
	// Requests read first only while at least one in readWorth of the
	// last readWindow found a committed record, by its read or by its
	// claim: one that does not read is answered by its claim.
	readWindow = 256
	readWorth  = 4
)

// errReadSkipped is a read not made because the queue was full: its
// request learns nothing and goes on to its claim.
var errReadSkipped = errors.New("idem: read queue full")

// reads coalesces the fast path's reads of one keeper; at most maxQueued
// wait (readMaxQueued, lower in tests).
type reads struct {
	d         driver.Driver
	batch     driver.KeyReadBatcher // nil: each read goes alone
	maxQueued int

	mu      sync.Mutex
	running int     // round trips in flight; while 0, nothing waits
	queue   []*read // reads waiting to be taken, oldest first

	// The read-first policy: skip is set when the last readWindow requests
	// found too few records; seen and found count them, without a lock: a
	// note that races the window's end counts in either window.
	skip        atomic.Bool
	seen, found atomic.Int64

	testHooks readHooks
}

// first reports whether a request is to read its key's record before its
// claim, as the policy says.
func (s *reads) first() bool { return readFirstOff || !s.skip.Load() }

// A benchmark's knob (internal/benchknob): with the read-first policy off
// every request reads first.
var readFirstOff = benchknob.Off("read-first")

// note tells the policy whether a request's key held a committed record,
// and at the end of each window decides for the next.
func (s *reads) note(found bool) {
	if found {
		s.found.Add(1)
	}
	if s.seen.Add(1)%readWindow == 0 {
		s.skip.Store(s.found.Swap(0)*readWorth < readWindow)
	}
}

// readHooks let tests see the queue without sleeping; set only by
// export_test.go, before the keeper is used, and nil in production.
type readHooks struct {
	queued func(driver.KeyID)   // a read waits in the queue
	sent   func([]driver.KeyID) // a round trip is to be sent
}

// read is one caller's read while it waits for a batch and until the
// batch answers it. taken and leads are guarded by reads.mu; rec, err and
// answered are written by the batch's goroutine before it wakes the
// read's, which reads them only after.
type read struct {
	ctx   context.Context
	id    driver.KeyID
	taken bool // in a batch, which answers it
	leads bool // its goroutine sends the batch (it is the first in it)
	// wake carries the batch the read's goroutine is to send, or nil once
	// the read is answered: one of the two, once, so it never blocks.
	wake     chan []*read
	answered bool
	rec      *driver.KeyRecord
	err      error
}

func (r *read) answer(rec *driver.KeyRecord, err error) {
	r.rec, r.err, r.answered = rec, err, true
	r.wake <- nil
}

// get reads id's committed record as driver.KeyGet does: driver.ErrNotFound
// when there is none, errReadSkipped when the queue is full. A batch that
// fails answers each of its reads with its error, and a caller that gives
// up ends only its own wait.
func (s *reads) get(ctx context.Context, id driver.KeyID) (*driver.KeyRecord, error) {
	if s.batch == nil {
		return s.d.KeyGet(ctx, s.d.Reader(), &driver.KeyGetParams{ID: id})
	}
	s.mu.Lock()
	if s.running == 0 {
		s.running++
		s.mu.Unlock()
		defer s.handOn()
		return s.alone(ctx, id)
	}
	if len(s.queue) >= s.maxQueued {
		s.mu.Unlock()
		return nil, errReadSkipped
	}
	r := &read{ctx: ctx, id: id, wake: make(chan []*read, 1)}
	s.queue = append(s.queue, r)
	var full []*read
	if len(s.queue) >= readWorthATrip && s.running < readMaxTrips {
		// Enough for a round trip: it goes now, beside those in flight.
		s.running++
		full = s.take()
		full[0].leads = true
	}
	s.mu.Unlock()
	if full != nil {
		full[0].wake <- full
	}
	if h := s.testHooks.queued; h != nil {
		h(id)
	}

	select {
	case batch := <-r.wake:
		if batch != nil {
			s.lead(batch)
		}
		return r.rec, r.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	switch {
	case !r.taken:
		i := slices.Index(s.queue, r)
		s.queue = slices.Delete(s.queue, i, i+1)
		s.mu.Unlock()
		return nil, ctx.Err()
	case !r.leads:
		// Its batch answers it, unread: a read changes nothing, so its
		// caller need not wait for it.
		s.mu.Unlock()
		return nil, ctx.Err()
	}
	s.mu.Unlock()
	// Its batch is on its way, or waits in wake: send it, for the others.
	s.lead(<-r.wake)
	return r.rec, r.err
}

// alone reads id on KeyGet's own statement, under its caller's context:
// a read that found none in flight costs what it did before reads were
// coalesced.
func (s *reads) alone(ctx context.Context, id driver.KeyID) (*driver.KeyRecord, error) {
	if h := s.testHooks.sent; h != nil {
		h([]driver.KeyID{id})
	}
	return s.d.KeyGet(ctx, s.d.Reader(), &driver.KeyGetParams{ID: id})
}

// lead sends batch, then hands on what waits.
func (s *reads) lead(batch []*read) {
	defer s.handOn()
	s.send(batch)
}

// handOn ends a batch's turn: it hands what waits to the oldest waiting
// read's goroutine as the next batch, or frees the batch's place when
// nothing waits.
func (s *reads) handOn() {
	s.mu.Lock()
	next := s.take()
	if len(next) == 0 {
		s.running--
		s.mu.Unlock()
		return
	}
	next[0].leads = true
	s.mu.Unlock()
	next[0].wake <- next
}

// take removes up to readMaxBatch reads from the head of the queue. s.mu
// is held.
func (s *reads) take() []*read {
	n := min(len(s.queue), readMaxBatch)
	if n == 0 {
		return nil
	}
	batch := slices.Clone(s.queue[:n])
	s.queue = slices.Delete(s.queue, 0, n)
	for _, r := range batch {
		r.taken = true
	}
	return batch
}

// send reads batch's keys and answers each of its reads once.
func (s *reads) send(batch []*read) {
	defer func() {
		// A panic here is a bug; it goes on, but no read may wait forever.
		if v := recover(); v != nil {
			for _, r := range batch {
				if !r.answered {
					r.answer(nil, fmt.Errorf("idem: the read batch ended without an answer: %v", v))
				}
			}
			panic(v)
		}
	}()
	if len(batch) == 1 {
		r := batch[0]
		r.answer(s.alone(r.ctx, r.id))
		return
	}
	ids, ctxs := make([]driver.KeyID, len(batch)), make([]context.Context, len(batch))
	for i, r := range batch {
		ids[i], ctxs[i] = r.id, r.ctx
	}
	if h := s.testHooks.sent; h != nil {
		h(ids)
	}
	c := newCallers(context.Background())
	defer c.end()
	c.join(ctxs...)
	recs, err := s.batch.KeyGetBatch(c.ctx, s.d.Reader(), &driver.KeyGetBatchParams{IDs: ids})
	if err == nil && len(recs) != len(batch) {
		err = fmt.Errorf("idem: a read batch of %d keys returned %d records", len(batch), len(recs))
	}
	if err != nil {
		// A read fails only with its database: the batch's error is each
		// read's, answered at once.
		for _, r := range batch {
			r.answer(nil, err)
		}
		return
	}
	for i, r := range batch {
		if recs[i] == nil {
			r.answer(nil, driver.ErrNotFound)
		} else {
			r.answer(recs[i], nil)
		}
	}
}
