package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/benchknob"
)

// The fast path's reads, coalesced where a read is a round trip
// (driver.KeyReadBatcher): a round trip of reads is a batch, admitted by
// the Batcher's own rules (admit.go) over one scope, so that a read that
// finds none in flight goes at once, alone, and the others wait and go
// together, up to readMaxBatch a round trip, at most readMaxTrips in
// flight. Each read is answered once, by the round trip that carried it.
// docs/architecture.md, "Coalesced reads"; the constants' figures:
// docs/architecture.md, "The hot path's mechanisms".
const (
	// readMaxBatch bounds the reads one round trip carries.
	readMaxBatch = 32
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

// reads coalesces the fast path's reads of one keeper.
type reads struct {
	d     driver.Driver
	batch driver.KeyReadBatcher // nil: each read goes alone

	mu  sync.Mutex
	adm admission[*read] // which reads go in which round trip; one scope, ""

	// The read-first policy: skip is set when the last readWindow requests
	// found too few records; seen and found count them, without a lock: a
	// note that races the window's end counts in either window.
	skip        atomic.Bool
	seen, found atomic.Int64

	testHooks readHooks
}

func newReads(d driver.Driver, batch driver.KeyReadBatcher) reads {
	return reads{d: d, batch: batch, adm: newAdmission[*read](readMaxBatch, readMaxQueued, readMaxTrips)}
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
	gaveUp func(driver.KeyID)   // a waiting read's caller gave up, before the read leaves
}

// read is one caller's read from its arrival until its round trip answers
// it. leads is guarded by reads.mu; rec, err and answered are written by
// the round trip's goroutine before it wakes the read's, which reads them
// only after.
type read struct {
	ctx   context.Context
	id    driver.KeyID
	leads bool // its goroutine sends its round trip: it started it, or was handed it
	// wake, made when the read waits, carries the round trip its goroutine
	// is to send, or nil once the read is answered: one of the two, once,
	// so it never blocks.
	wake     chan []*read
	answered bool
	rec      *driver.KeyRecord
	err      error
}

func (r *read) answer(rec *driver.KeyRecord, err error) {
	r.rec, r.err, r.answered = rec, err, true
	if r.wake != nil {
		r.wake <- nil
	}
}

// get reads id's committed record as driver.KeyGet does: driver.ErrNotFound
// when there is none, errReadSkipped when the queue is full. A round trip
// that fails answers each of its reads with its error, and a caller that
// gives up ends only its own wait.
func (s *reads) get(ctx context.Context, id driver.KeyID) (*driver.KeyRecord, error) {
	if s.batch == nil {
		return s.d.KeyGet(ctx, s.d.Reader(), &driver.KeyGetParams{ID: id})
	}
	r := &read{ctx: ctx, id: id}
	s.mu.Lock()
	switch admitted, trip := s.adm.arrive("", r); admitted {
	case starts:
		s.adm.closeOpen("") // a round trip is sent at once: nobody joins it
		r.leads = true
		s.mu.Unlock()
		s.lead(trip)
		return r.rec, r.err
	case busy:
		s.mu.Unlock()
		return nil, errReadSkipped
	}
	r.wake = make(chan []*read, 1) // it waits (a round trip has no open batch to join)
	s.mu.Unlock()
	if h := s.testHooks.queued; h != nil {
		h(id)
	}

	select {
	case trip := <-r.wake:
		if trip != nil {
			s.lead(trip)
		}
		return r.rec, r.err
	case <-ctx.Done():
	}
	if h := s.testHooks.gaveUp; h != nil {
		h(id)
	}
	s.mu.Lock()
	left, leads := s.adm.leave("", r), r.leads
	s.mu.Unlock()
	if left || !leads {
		// Never taken, or its round trip answers it unread: a read changes
		// nothing, so its caller need not wait for it.
		return nil, ctx.Err()
	}
	// Its round trip waits in wake: send it, for the others.
	s.lead(<-r.wake)
	return r.rec, r.err
}

// lead sends trip, then hands what waits to the oldest waiting reads'
// goroutines as the round trips that may start now.
func (s *reads) lead(trip []*read) {
	defer func() {
		s.mu.Lock()
		next := s.adm.end("", len(trip))
		for _, t := range next {
			s.adm.closeOpen("")
			t[0].leads = true
		}
		s.mu.Unlock()
		for _, t := range next {
			t[0].wake <- t
		}
	}()
	s.send(trip)
}

// send reads trip's keys and answers each of its reads once: a lone read
// on KeyGet's own statement, under its caller's context, costs what it did
// before reads were coalesced.
func (s *reads) send(trip []*read) {
	defer func() {
		// A panic here is a bug; it goes on, but no read may wait forever.
		if v := recover(); v != nil {
			for _, r := range trip {
				if !r.answered {
					r.answer(nil, fmt.Errorf("idem: the read batch ended without an answer: %v", v))
				}
			}
			panic(v)
		}
	}()
	if len(trip) == 1 {
		r := trip[0]
		if h := s.testHooks.sent; h != nil {
			h([]driver.KeyID{r.id})
		}
		r.answer(s.d.KeyGet(r.ctx, s.d.Reader(), &driver.KeyGetParams{ID: r.id}))
		return
	}
	ids, ctxs := make([]driver.KeyID, len(trip)), make([]context.Context, len(trip))
	for i, r := range trip {
		ids[i], ctxs[i] = r.id, r.ctx
	}
	if h := s.testHooks.sent; h != nil {
		h(ids)
	}
	c := newCallers(context.Background())
	defer c.end()
	c.join(ctxs...)
	recs, err := s.batch.KeyGetBatch(c.ctx, s.d.Reader(), &driver.KeyGetBatchParams{IDs: ids})
	if err == nil && len(recs) != len(trip) {
		err = fmt.Errorf("idem: a read batch of %d keys returned %d records", len(trip), len(recs))
	}
	for i, r := range trip {
		switch {
		case err != nil:
			// A read fails only with its database: the round trip's error
			// is each read's, answered at once.
			r.answer(nil, err)
		case recs[i] == nil:
			r.answer(nil, driver.ErrNotFound)
		default:
			r.answer(recs[i], nil)
		}
	}
}
