package idem

import (
	"math"
	"slices"
	"time"
)

// admission decides which of the Batcher's requests go into which batch,
// and when. It is a plain value: no locks, channels or clocks (the time is
// passed in). The Batcher holds it under its mutex and carries out what
// its methods return. Its rules, in full (docs/architecture.md, "Group
// commit", has them as a table):
//
//   - place: a batch of scope s may take a place while fewer batches run
//     than Concurrency, or 2×Concurrency when s has none running; and, when
//     s runs its share (ceil(Share × Concurrency)) or more, only while no
//     other waiting scope runs less than its share.
//   - start: what waits of a scope becomes a batch (its oldest, up to
//     MaxBatch) when a place is free for it and nothing of its scope runs,
//     or as many wait as one of its running batches carries on average,
//     or its oldest has waited a quarter of MaxWait (restless). Scopes are
//     tried in turn, and the one started goes to the back.
//   - join: an arrival joins its scope's newest batch while that has not
//     begun, has fewer than MaxBatch requests, nothing of its scope waits
//     and no place is free for a batch of its own.
//   - bound: an arrival that would leave more than MaxQueued waiting gets
//     ErrBusy.
//   - expire: a waiting request whose MaxWait passed gets ErrBusy when
//     nothing of its scope runs; otherwise it waits for the database, not
//     for a place, and its MaxWait starts again.
//   - leave: a request whose caller gave up leaves the queue, and is never
//     taken.
//
// Invariants, after every method: no waiting scope can start a batch;
// waiting ≤ maxQueued; running ≤ 2×concurrency; no batch holds more than
// maxBatch requests. A lone request therefore runs at once, and a waiting
// scope that can start is passed over at most once by every other scope.
type admission[W comparable] struct {
	maxBatch, maxQueued, concurrency int
	share                            int           // ceil(Share × Concurrency), at least 1
	restless                         time.Duration // MaxWait / 4

	running int                  // batches running (or open: taken, not begun), of every scope
	waiting int                  // requests waiting to be taken, of every scope
	scopes  map[string]*scope[W] // the scopes with a batch running or a request waiting
	turns   []*scope[W]          // the scopes with requests waiting, in the order they take places
}

// scope is one scope's (Key.Scope: the tenant's) part of an admission.
type scope[W comparable] struct {
	name    string
	running int         // its batches running
	carried int         // requests in its running batches
	open    int         // requests in its newest batch while it may be joined; 0: none
	queue   []waiter[W] // its requests waiting to be taken, oldest first
}

type waiter[W comparable] struct {
	w     W
	since time.Time // when it came
}

// start is a batch the Batcher is to run: batch[0]'s goroutine runs it.
type start[W comparable] struct {
	scope string
	batch []W
}

func newAdmission[W comparable](cfg BatchConfig) admission[W] {
	return admission[W]{maxBatch: cfg.MaxBatch, maxQueued: cfg.MaxQueued, concurrency: cfg.Concurrency,
		share:    max(1, int(math.Ceil(cfg.Share*float64(cfg.Concurrency)-1e-9))),
		restless: cfg.MaxWait / 4, scopes: map[string]*scope[W]{}}
}

// arrive queues w of scope name and starts what may start. It reports
// whether w waits (if not, it is in one of the batches started), and busy
// when the bound refused it: then w is not queued.
func (s *admission[W]) arrive(name string, w W, now time.Time) (starts []start[W], waits, busy bool) {
	sc := s.scopes[name]
	if sc == nil {
		sc = &scope[W]{name: name}
		s.scopes[name] = sc
	}
	sc.queue = append(sc.queue, waiter[W]{w, now})
	if len(sc.queue) == 1 {
		s.turns = append(s.turns, sc)
	}
	s.waiting++
	starts = s.fill(now, nil)
	if len(sc.queue) == 0 || sc.queue[len(sc.queue)-1].w != w {
		return starts, false, false
	}
	if s.waiting > s.maxQueued {
		// Only sc could start, and did not: what it left is as before.
		s.remove(sc, len(sc.queue)-1)
		return starts, false, true
	}
	return starts, true, false
}

// joinable reports whether an arrival of scope name is to join its scope's
// open batch (join), rather than arrive.
func (s *admission[W]) joinable(name string) bool {
	sc := s.scopes[name]
	return sc != nil && sc.open > 0 && sc.open < s.maxBatch && len(sc.queue) == 0 && !s.placeFor(sc)
}

// join counts an arrival that joined scope name's open batch.
func (s *admission[W]) join(name string) {
	sc := s.scopes[name]
	sc.open++
	sc.carried++
}

// closeOpen records that scope name's open batch takes nobody more: it
// began, or every caller in it has gone.
func (s *admission[W]) closeOpen(name string) { s.scopes[name].open = 0 }

// wake starts what may start by now: a restless request's turn.
func (s *admission[W]) wake(now time.Time) []start[W] { return s.fill(now, nil) }

// end records that a batch of scope name carrying n requests ended, and
// starts what may start in its place.
func (s *admission[W]) end(name string, n int, now time.Time) []start[W] {
	sc := s.scopes[name]
	s.running--
	sc.running--
	sc.carried -= n
	s.forget(sc)
	return s.fill(now, nil)
}

// expire is w's MaxWait passed: it reports busy, and removes w, when w
// still waits and nothing of its scope runs.
func (s *admission[W]) expire(name string, w W, now time.Time) (starts []start[W], busy bool) {
	if sc := s.scopes[name]; sc != nil && sc.running > 0 {
		return nil, false
	}
	return s.leave(name, w, now)
}

// leave removes w from the queue, unless it was taken (left is false).
func (s *admission[W]) leave(name string, w W, now time.Time) (starts []start[W], left bool) {
	sc := s.scopes[name]
	if sc == nil {
		return nil, false
	}
	i := slices.IndexFunc(sc.queue, func(o waiter[W]) bool { return o.w == w })
	if i < 0 {
		return nil, false
	}
	s.remove(sc, i)
	return s.fill(now, nil), true
}

// remove takes sc.queue[i] out of the queue.
func (s *admission[W]) remove(sc *scope[W], i int) {
	sc.queue = slices.Delete(sc.queue, i, i+1)
	s.waiting--
	if len(sc.queue) == 0 {
		s.turns = slices.DeleteFunc(s.turns, func(o *scope[W]) bool { return o == sc })
		s.forget(sc)
	}
}

// forget drops sc once nothing of it runs or waits, so that the scopes
// are only those of the moment.
func (s *admission[W]) forget(sc *scope[W]) {
	if sc.running == 0 && len(sc.queue) == 0 {
		delete(s.scopes, sc.name)
	}
}

// fill starts batches, the first startable scope in turn each, until no
// waiting scope can start; each start takes a place, so it ends.
func (s *admission[W]) fill(now time.Time, starts []start[W]) []start[W] {
	for {
		i := slices.IndexFunc(s.turns, func(sc *scope[W]) bool { return s.startable(sc, now) })
		if i < 0 {
			return starts
		}
		starts = append(starts, s.take(s.turns[i]))
	}
}

// startable is the rule "start".
func (s *admission[W]) startable(sc *scope[W], now time.Time) bool {
	return len(sc.queue) > 0 && s.placeFor(sc) &&
		(sc.running == 0 || len(sc.queue)*sc.running >= sc.carried || now.Sub(sc.queue[0].since) >= s.restless)
}

// placeFor is the rule "place".
func (s *admission[W]) placeFor(sc *scope[W]) bool {
	limit := s.concurrency
	if sc.running == 0 {
		limit *= 2 // so that batches sitting on one scope's locks cannot hold another's requests past MaxWait
	}
	return s.running < limit && (sc.running < s.share || !slices.ContainsFunc(s.turns, func(o *scope[W]) bool {
		return o != sc && o.running < s.share
	}))
}

// take starts a batch of up to maxBatch of sc's oldest waiting requests,
// open to arrivals until it begins, and sends sc to the back of the turns
// (or out of them when nothing of it waits any more).
func (s *admission[W]) take(sc *scope[W]) start[W] {
	n := min(len(sc.queue), s.maxBatch)
	batch := make([]W, n)
	for i := range batch {
		batch[i] = sc.queue[i].w
	}
	sc.queue = slices.Delete(sc.queue, 0, n)
	s.waiting -= n
	s.running++
	sc.running++
	sc.carried += n
	sc.open = n
	s.turns = slices.DeleteFunc(s.turns, func(o *scope[W]) bool { return o == sc })
	if len(sc.queue) > 0 {
		s.turns = append(s.turns, sc)
	}
	return start[W]{scope: sc.name, batch: batch}
}
