package idem

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/idemhq/idem/driver"
)

// The fast path's reads, coalesced. Every Do and Batcher.Do begins with a
// read of its key's record: a replay is answered by it, a first arrival
// finds nothing and goes on to its claim. Alone, each read is a round trip
// of its own, and under load the database's per-statement overhead and
// the context switches cost more than the reads themselves. So the reads
// of the moment share a round trip (driver.KeyGetBatch), as a Batcher's
// first arrivals share a transaction, with no timer:
//
//   - a read that finds none in flight goes at once, alone, on KeyGet's
//     own statement: at low load nothing waits and nothing changes;
//   - otherwise it waits in the queue, and a batch that ends hands up to
//     readMaxBatch waiting reads to the oldest one's goroutine, which sends
//     them as the next batch;
//   - a read that fills the queue to readMaxBatch sends it at once, as a
//     batch beside those in flight, up to readMaxBatches of them: more
//     reads than one round trip carries are not held back by it.
//
// One batch in flight makes the largest batches, and so spends the least
// CPU: PostgreSQL runs a batch's statements one after another in one
// backend, with one wake-up for all. Measured on two cores with 16 clients
// replaying cold over HTTP, PostgreSQL spent about 43 µs of CPU a replay
// with a round trip a read, 19 µs with one batch in flight (about six
// reads a batch), and 26 and 31 µs when two or four batches could run at
// once.
const (
	// readMaxBatch bounds the reads one round trip carries.
	readMaxBatch = 32
	// readMaxBatches bounds the batches in flight, each on a connection of
	// its own.
	readMaxBatches = 4
)

// reads coalesces the fast path's reads of one keeper. Nothing bounds the
// queue but the callers: each waits for its own read, as it would wait for
// a connection of the pool without the queue.
type reads struct {
	d driver.Driver

	mu      sync.Mutex
	running int     // batches in flight; while 0, nothing waits
	queue   []*read // oldest first; holds given-up reads until a batch passes them
	waiting int     // reads in queue still waiting to be taken

	testHooks readHooks
}

// readHooks let tests see the queue without sleeping; set only by
// export_test.go, before the keeper is used, and nil in production.
type readHooks struct {
	// queued is called with each read's key once it waits in the queue.
	queued func(driver.KeyID)
	// sent is called with the keys of each round trip, before it is sent.
	sent func([]driver.KeyID)
}

// read is one caller's read from its arrival until it is answered. taken,
// leads and gaveUp are guarded by reads.mu; rec and err are written before
// done is closed and read only after.
type read struct {
	ctx    context.Context
	id     driver.KeyID
	taken  bool         // in a batch, which answers it
	leads  bool         // its goroutine sends the batch (it is the first in it)
	gaveUp bool         // its caller's ctx ended before it was taken
	next   chan []*read // the batch its goroutine is to send
	done   chan struct{}
	rec    *driver.KeyRecord
	err    error
}

func (r *read) answer(rec *driver.KeyRecord, err error) {
	r.rec, r.err = rec, err
	close(r.done) // a second answer panics here: it would be a bug
}

// get reads id's committed record as driver.KeyGet does: driver.ErrNotFound
// when there is none. Its error is its own: a batch that fails is read again
// one key at a time, and a caller that gives up ends only its own wait.
func (s *reads) get(ctx context.Context, id driver.KeyID) (*driver.KeyRecord, error) {
	if !s.d.BatchesReads() {
		return s.d.KeyGet(ctx, s.d.Reader(), &driver.KeyGetParams{ID: id})
	}
	r := &read{ctx: ctx, id: id, next: make(chan []*read, 1), done: make(chan struct{})}
	s.mu.Lock()
	if s.running == 0 {
		s.running++
		r.taken, r.leads = true, true
		s.mu.Unlock()
		s.lead([]*read{r})
		return r.rec, r.err
	}
	s.queue = append(s.queue, r)
	s.waiting++
	if s.waiting >= readMaxBatch && s.running < readMaxBatches {
		// A full batch: it goes now, beside those in flight.
		s.running++
		batch := s.take()
		batch[0].leads = true
		s.mu.Unlock()
		if batch[0] != r {
			batch[0].next <- batch
		} else {
			s.lead(batch)
			return r.rec, r.err
		}
	} else {
		s.mu.Unlock()
	}
	if h := s.testHooks.queued; h != nil {
		h(id)
	}

	select {
	case <-r.done:
		return r.rec, r.err
	case batch := <-r.next:
		s.lead(batch)
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
	// The batch waits in its channel: send it, for the others in it.
	s.lead(<-r.next)
	return r.rec, r.err
}

// lead sends batch, then hands what waits to the oldest waiting read's
// goroutine as the next batch, or frees its place when nothing waits.
func (s *reads) lead(batch []*read) {
	defer func() {
		s.mu.Lock()
		next := s.take()
		if len(next) == 0 {
			s.running--
			s.mu.Unlock()
			return
		}
		next[0].leads = true
		s.mu.Unlock()
		next[0].next <- next
	}()
	s.send(batch)
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
				select {
				case <-r.done:
				default:
					r.answer(nil, fmt.Errorf("idem: the read batch ended without an answer: %v", v))
				}
			}
			panic(v)
		}
	}()
	ids := make([]driver.KeyID, len(batch))
	for i, r := range batch {
		ids[i] = r.id
	}
	if h := s.testHooks.sent; h != nil {
		h(ids)
	}
	if len(batch) == 1 {
		// KeyGet's own statement, under its caller's context: a lone read
		// is what it was before reads were coalesced.
		r := batch[0]
		r.answer(s.d.KeyGet(r.ctx, s.d.Reader(), &driver.KeyGetParams{ID: r.id}))
		return
	}
	// The batch reads under a context of its own, ended only when every
	// caller in it has gone: one caller's hang-up must not fail the others'
	// reads.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int64
	left.Store(int64(len(batch)))
	for _, r := range batch {
		stop := context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	recs, err := s.d.KeyGetBatch(ctx, s.d.Reader(), &driver.KeyGetBatchParams{IDs: ids})
	if err == nil && len(recs) != len(batch) {
		err = fmt.Errorf("idem: a read batch of %d keys returned %d records", len(batch), len(recs))
	}
	if err != nil {
		// The error may be one read's (a pipeline stops at the first
		// statement that fails): each read again alone, under its own
		// caller's context, gets its own answer.
		for _, r := range batch {
			r.answer(s.d.KeyGet(r.ctx, s.d.Reader(), &driver.KeyGetParams{ID: r.id}))
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
