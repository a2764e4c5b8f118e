package idem

import (
	"sync"
	"sync/atomic"
)

// Whether a request reads its key's record before its claim. A completed
// record is immutable until it expires, so a plain read outside any
// transaction answers a duplicate; a first arrival pays for its read and
// still claims. A request that does not read is still answered right, by
// its claim, which finds the committed record. So requests read first only
// while at least one in readWorth of the last readWindow found a committed
// record, by its read or by its claim. Where claims queue for a bounded
// set of writers (driver.WriterBound: SQLite's one), a replay sent to its
// claim would wait for the writer, so there requests always read first.
// The figures are in docs/benchmarks.md, "The hot path's mechanisms".
const (
	readWindow = 256
	readWorth  = 4
)

// readPolicy decides whether requests read their key before the claim.
type readPolicy struct {
	always bool        // the driver's writers are bounded: never skip
	skip   atomic.Bool // the last window's requests found too few records
	mu     sync.Mutex
	seen   int // requests noted in this window
	found  int // of them, those whose key held a committed record
}

// first reports whether a request is to read its key's record first.
func (p *readPolicy) first() bool { return p.always || !p.skip.Load() }

// note records whether a request's key held a committed record, and at the
// end of each window decides for the next.
func (p *readPolicy) note(found bool) {
	if p.always {
		return
	}
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
