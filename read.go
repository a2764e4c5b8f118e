package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/idemhq/idem/driver"
)

// The fast path's reads, coalesced. Do and Batcher.Do begin with a read of
// their key's record (while such reads find records often enough, below).
// Where a read is a round trip (driver.KeyReadBatcher), the reads of the
// moment share one, with no timer:
//
//   - a read that finds none in flight goes at once, alone, on KeyGet's
//     own statement: at low load nothing waits;
//   - otherwise it waits in the queue (at most readMaxQueued), and a round
//     trip that ends hands up to readMaxBatch waiting reads to the oldest
//     one's goroutine, which sends them as the next;
//   - a read that brings the queue to readWorthATrip sends it at once,
//     beside the round trips in flight, up to readMaxTrips of them.
//
// Each read is answered once, by the round trip that carried it. The
// constants' figures are in docs/benchmarks.md, "The hot path's
// mechanisms".
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
)

// errReadSkipped is a read not made because the queue was full: its
// request learns nothing and goes on to its claim.
var errReadSkipped = errors.New("idem: read queue full")

// Whether to read at all. A first arrival pays for its read and still
// claims; a request that does not read is still answered right, by its
// claim, which finds the committed record. So where reads are round trips,
// requests read first only while at least one in readWorth of the last
// readWindow found a committed record, by its read or by its claim.
const (
	readWindow = 256
	readWorth  = 4
)

// readPolicy decides whether requests read their key before the claim.
type readPolicy struct {
	skip  atomic.Bool // the last window's requests found too few records
	mu    sync.Mutex
	seen  int // requests noted in this window
	found int // of them, those whose key held a committed record
}

// note records whether a request's key held a committed record, and at the
// end of each window decides for the next.
func (p *readPolicy) note(found bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen++
	if found {
		p.found++
	}
	if p.seen == readWindow {
		p.skip.Store(p.found*readWorth < readWindow)
		p.seen, p.found = 0, 0
	}
}

// reads coalesces the fast path's reads of one keeper; at most maxQueued
// wait (readMaxQueued, lower in tests).
type reads struct {
	d         driver.Driver
	batch     driver.KeyReadBatcher // nil: each read goes alone
	maxQueued int

	mu      sync.Mutex
	running int     // round trips in flight; while 0, nothing waits
	queue   []*read // oldest first; holds given-up reads until a batch passes them
	waiting int     // reads in queue still waiting to be taken

	policy readPolicy

	testHooks readHooks
}

// first reports whether a request is to read its key's record before its
// claim: always where a read is no round trip, else as the policy says.
func (s *reads) first() bool { return s.batch == nil || !s.policy.skip.Load() }

// note tells the policy whether a request's key held a committed record.
func (s *reads) note(found bool) {
	if s.batch != nil {
		s.policy.note(found)
	}
}

// readHooks let tests see the queue without sleeping; set only by
// export_test.go, before the keeper is used, and nil in production.
type readHooks struct {
	// queued is called with each read's key once it waits in the queue.
	queued func(driver.KeyID)
	// sent is called with the keys of each round trip, before it is sent.
	sent func([]driver.KeyID)
}

// read is one caller's read while it waits for a batch and until the
// batch answers it. taken, leads and gaveUp are guarded by reads.mu; rec,
// err and answered are written by the batch's goroutine before it wakes
// the read's, which reads them only after.
type read struct {
	ctx    context.Context
	id     driver.KeyID
	taken  bool // in a batch, which answers it
	leads  bool // its goroutine sends the batch (it is the first in it)
	gaveUp bool // its caller's ctx ended before it was taken
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
	if s.waiting >= s.maxQueued {
		s.mu.Unlock()
		return nil, errReadSkipped
	}
	r := &read{ctx: ctx, id: id, wake: make(chan []*read, 1)}
	s.queue = append(s.queue, r)
	s.waiting++
	var full []*read
	if s.waiting >= readWorthATrip && s.running < readMaxTrips {
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
		r.gaveUp = true
		s.waiting--
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

// take removes up to readMaxBatch waiting reads from the head of the
// queue, and the given-up ones it passes. s.mu is held.
func (s *reads) take() []*read {
	if s.waiting == 0 {
		clear(s.queue)
		s.queue = s.queue[:0]
		return nil
	}
	batch := make([]*read, 0, min(s.waiting, readMaxBatch))
	i := 0
	for ; i < len(s.queue) && len(batch) < readMaxBatch; i++ {
		if r := s.queue[i]; !r.gaveUp {
			r.taken = true
			batch = append(batch, r)
		}
	}
	n := copy(s.queue, s.queue[i:])
	clear(s.queue[n:])
	s.queue = s.queue[:n]
	s.waiting -= len(batch)
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
	ids := make([]driver.KeyID, len(batch))
	for i, r := range batch {
		ids[i] = r.id
	}
	if h := s.testHooks.sent; h != nil {
		h(ids)
	}
	// The batch reads under a context of its own, ended only when every
	// caller in it has gone: one caller's hang-up must not fail the others'
	// reads.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int64
	left.Store(int64(len(batch)))
	gone := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	stops := make([]func() bool, len(batch))
	for i, r := range batch {
		stops[i] = context.AfterFunc(r.ctx, gone)
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	recs, err := s.batch.KeyGetBatch(ctx, s.d.Reader(), &driver.KeyGetBatchParams{IDs: ids})
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
