package idem

import "slices"

// admission decides which waiting requests go into which batch of their
// scope: the Batcher's first arrivals, a batch a transaction of one scope
// (Key.Scope: the tenant), and the keeper's fast-path reads, a batch a
// round trip, all of one scope (read.go). It is a plain value, without
// locks, channels or clocks, which its user holds under its mutex,
// carrying out the batches it starts. Which scope's batch goes to the
// database next is not its decision but the gate's (internal/gate), the
// one authority among scopes. Its rules (docs/architecture.md, "Group
// commit"):
//
//   - join: an arrival joins its scope's open batch (taken, not yet
//     begun: waiting for its slot or its connection) while that carries
//     fewer than maxBatch. A round trip of reads goes at once: it is
//     never open.
//   - start: otherwise, while its scope has fewer than perScope batches
//     taken, the arrival starts a batch, and leads it, when its scope
//     runs none, or when with it as many wait as one of the scope's
//     batches carries on average: the waiting requests, oldest first, up
//     to maxBatch, and it.
//   - bound: otherwise it waits, unless maxQueued wait already: busy.
//   - hand on: when a batch ends, the oldest of its scope's waiting
//     requests (up to maxBatch) become its scope's next batch, led by
//     the first of them, when the scope runs none, or as many wait as
//     one of its batches carries on average.
//   - leave: a waiting request whose caller gave up leaves, never taken.
//
// After every method a scope with requests waiting has a batch taken, no
// open one with room, and perScope batches or fewer waiting than its
// batches carry on average: so a lone request runs at once, batches stay
// of about the size the load makes them, no batch carries more than
// maxBatch, a scope's requests are taken first come, first served, and a
// request waits only behind its own scope's batches, which end within
// their deadlines (admit_internal_test.go checks them all).
type admission[W comparable] struct {
	maxBatch, maxQueued, perScope int

	running int                  // batches taken (open or begun), of every scope
	waiting int                  // requests waiting, of every scope
	scopes  map[string]*scope[W] // the scopes with a batch taken
}

// scope is one scope's part of an admission.
type scope[W comparable] struct {
	running int // its batches taken
	carried int // requests in its batches taken
	open    int // requests in its newest batch while it may be joined; 0: none
	queue   []W // its requests waiting, oldest first
}

// admit is an arrival's part.
type admit int

const (
	joins  admit = iota // it is to join its scope's open batch (then join)
	starts              // it starts a batch and leads it
	waits               // it waits to be handed a batch
	busy                // refused: maxQueued wait
)

// newAdmission returns an admission of batches of at most maxBatch, at
// most perScope of a scope taken at once, and at most maxQueued waiting.
func newAdmission[W comparable](maxBatch, maxQueued, perScope int) admission[W] {
	return admission[W]{maxBatch: maxBatch, maxQueued: maxQueued, perScope: perScope, scopes: map[string]*scope[W]{}}
}

// arrive admits w of scope name (rules join, start and bound); when it
// starts a batch, that is batch, w last.
func (s *admission[W]) arrive(name string, w W) (_ admit, batch []W) {
	sc := s.scopes[name]
	if sc == nil {
		sc = &scope[W]{}
		s.scopes[name] = sc
	}
	switch {
	case sc.open > 0 && sc.open < s.maxBatch:
		return joins, nil // counted by join, once it joined
	case s.startable(sc, len(sc.queue)+1):
		n := min(len(sc.queue), s.maxBatch-1)
		batch = append(s.take(sc, n), w)
		sc.open++
		sc.carried++
		return starts, batch
	case s.waiting >= s.maxQueued:
		return busy, nil
	}
	sc.queue = append(sc.queue, w)
	s.waiting++
	return waits, nil
}

// take makes a batch of sc's n oldest waiting requests (n may be 0).
func (s *admission[W]) take(sc *scope[W], n int) []W {
	batch := make([]W, n, n+1)
	copy(batch, sc.queue)
	sc.queue = slices.Delete(sc.queue, 0, n)
	s.waiting -= n
	s.running++
	sc.running++
	sc.carried += n
	sc.open = n
	return batch
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
// returns the scope's batches that may start now, taken from what waits
// (rule hand on).
func (s *admission[W]) end(name string, n int) (starts [][]W) {
	sc := s.scopes[name]
	s.running--
	sc.running--
	sc.carried -= n
	for len(sc.queue) > 0 && s.startable(sc, len(sc.queue)) {
		starts = append(starts, s.take(sc, min(len(sc.queue), s.maxBatch)))
	}
	if sc.running == 0 {
		delete(s.scopes, name)
	}
	return starts
}

// startable is the rule start for n requests of sc.
func (s *admission[W]) startable(sc *scope[W], n int) bool {
	return sc.running < s.perScope && n*sc.running >= sc.carried
}

// leave removes w from its scope's queue, unless it was handed a batch
// (left is false).
func (s *admission[W]) leave(name string, w W) (left bool) {
	sc := s.scopes[name]
	if sc == nil {
		return false
	}
	i := slices.Index(sc.queue, w)
	if i < 0 {
		return false
	}
	sc.queue = slices.Delete(sc.queue, i, i+1)
	s.waiting--
	return true
}
