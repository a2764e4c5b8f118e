package idem

import (
	"math"
	"slices"
	"time"
)

// admission decides which of the Batcher's requests go into which batch,
// and when: a plain value, without locks, channels or clocks (the time is
// passed in), which the Batcher holds under its mutex, carrying out the
// batches its methods start. Its rules (docs/architecture.md, "Group
// commit"):
//
//   - place: a batch of scope s may take a place while fewer batches run
//     than Concurrency (2×Concurrency when s runs none) and, once s runs
//     its share, while no other waiting scope runs less than its share.
//   - start: what waits of a scope becomes a batch (its oldest, up to
//     MaxBatch) when a place is free for it and the scope runs nothing, or
//     as many wait as a running batch of its carries on average, or its
//     oldest has waited MaxWait/4 (restless). Scopes are tried in turn;
//     the one started goes to the back.
//   - join: an arrival joins its scope's newest batch that has not begun,
//     below MaxBatch, when nothing of its scope waits and no place is free.
//   - bound: an arrival that would make more than MaxQueued wait is busy.
//   - expire: a request that waited MaxWait is busy if its scope runs
//     nothing; otherwise it waits for the database, and MaxWait restarts.
//     Each waiting request ticks every MaxWait/4 to apply start and expire.
//   - leave: a request whose caller gave up leaves, and is never taken.
//
// After every method no waiting scope can start, waiting ≤ maxQueued and
// running ≤ 2×concurrency: so a lone request runs at once, no batch holds
// more than maxBatch, and a scope running nothing is passed over at most
// once by each other scope (admit_internal_test.go checks them all).
type admission[W comparable] struct {
	maxBatch, maxQueued, concurrency int
	share                            int           // ceil(Share × Concurrency), at least 1
	maxWait, tickEvery               time.Duration // tickEvery: MaxWait/4, rounded up

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
	due   time.Time // when its MaxWait passes
}

func newAdmission[W comparable](cfg BatchConfig) admission[W] {
	return admission[W]{maxBatch: cfg.MaxBatch, maxQueued: cfg.MaxQueued, concurrency: cfg.Concurrency,
		share:   max(1, int(math.Ceil(cfg.Share*float64(cfg.Concurrency)-1e-9))),
		maxWait: cfg.MaxWait, tickEvery: (cfg.MaxWait + 3) / 4, scopes: map[string]*scope[W]{}}
}

// arrive queues w of scope name and starts what may start (each batch to
// be run by its first's goroutine). It reports whether w waits (if not, it
// is in a batch started), or busy when the bound refused it.
func (s *admission[W]) arrive(name string, w W, now time.Time) (starts [][]W, waits, busy bool) {
	sc := s.scopes[name]
	if sc == nil {
		sc = &scope[W]{name: name}
		s.scopes[name] = sc
	}
	sc.queue = append(sc.queue, waiter[W]{w, now, now.Add(s.maxWait)})
	if len(sc.queue) == 1 {
		s.turns = append(s.turns, sc)
	}
	s.waiting++
	starts = s.fill(now, nil)
	if len(sc.queue) == 0 || sc.queue[len(sc.queue)-1].w != w {
		return starts, false, false
	}
	if s.waiting > s.maxQueued {
		// Before w came no scope could start, and w's coming changed only
		// sc: without w, none can.
		s.remove(sc, len(sc.queue)-1)
		return starts, false, true
	}
	return starts, true, false
}

// joinable reports whether an arrival of scope name is to join its scope's
// open batch (join), rather than arrive.
func (s *admission[W]) joinable(name string) bool {
	sc := s.scopes[name]
	return sc != nil && sc.open > 0 && sc.open < s.maxBatch && len(sc.queue) == 0 && !s.placeFor(sc, s.below())
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

// end records that a batch of scope name carrying n requests ended, and
// starts what may start in its place.
func (s *admission[W]) end(name string, n int, now time.Time) [][]W {
	sc := s.scopes[name]
	s.running--
	sc.running--
	sc.carried -= n
	s.forget(sc)
	return s.fill(now, nil)
}

// tick is w's tick (rule expire): it starts what may start by now, and
// reports whether w still waits, or is busy (then removed).
func (s *admission[W]) tick(name string, w W, now time.Time) (starts [][]W, waits, busy bool) {
	sc, i := s.find(name, w)
	if i >= 0 && !now.Before(sc.queue[i].due) {
		if sc.running == 0 {
			s.remove(sc, i)
			return s.fill(now, nil), false, true
		}
		sc.queue[i].due = now.Add(s.maxWait)
	}
	starts = s.fill(now, nil)
	_, i = s.find(name, w)
	return starts, i >= 0, false
}

// leave removes w from the queue, unless it was taken (left is false).
func (s *admission[W]) leave(name string, w W, now time.Time) (starts [][]W, left bool) {
	sc, i := s.find(name, w)
	if i < 0 {
		return nil, false
	}
	s.remove(sc, i)
	return s.fill(now, nil), true
}

// find returns w's scope and place in its queue, -1 when it is not there.
func (s *admission[W]) find(name string, w W) (*scope[W], int) {
	sc := s.scopes[name]
	if sc == nil {
		return nil, -1
	}
	return sc, slices.IndexFunc(sc.queue, func(o waiter[W]) bool { return o.w == w })
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
func (s *admission[W]) fill(now time.Time, starts [][]W) [][]W {
	for {
		if s.running >= 2*s.concurrency {
			return starts // no place for anyone
		}
		below := s.below()
		i := slices.IndexFunc(s.turns, func(sc *scope[W]) bool { return s.startable(sc, now, below) })
		if i < 0 {
			return starts
		}
		starts = append(starts, s.take(s.turns[i]))
	}
}

// startable is the rule "start".
func (s *admission[W]) startable(sc *scope[W], now time.Time, below int) bool {
	return len(sc.queue) > 0 && s.placeFor(sc, below) &&
		(sc.running == 0 || len(sc.queue)*sc.running >= sc.carried || now.Sub(sc.queue[0].since) >= s.tickEvery)
}

// placeFor is the rule "place"; below is the number of waiting scopes
// running less than their share (counted once for all the scopes tried).
func (s *admission[W]) placeFor(sc *scope[W], below int) bool {
	limit := s.concurrency
	if sc.running == 0 {
		limit *= 2 // so that batches sitting on one scope's locks cannot hold another's requests past MaxWait
	}
	return s.running < limit && (sc.running < s.share || below == 0) // at its share, sc is not counted in below
}

// below counts the waiting scopes that run less than their share.
func (s *admission[W]) below() int {
	n := 0
	for _, sc := range s.turns {
		if sc.running < s.share {
			n++
		}
	}
	return n
}

// take starts a batch of up to maxBatch of sc's oldest waiting requests,
// open to arrivals until it begins, and sends sc to the back of the turns
// (or out of them when nothing of it waits any more).
func (s *admission[W]) take(sc *scope[W]) []W {
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
	return batch
}
