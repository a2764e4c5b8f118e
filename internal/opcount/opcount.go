// Package opcount counts events per operation with a bound on the number
// of operations kept, so that a label taken from requests (a route, a
// method) cannot grow a metric without limit.
package opcount

import (
	"maps"
	"sync"
)

// Other is the operation the counts of operations past the bound go to.
const Other = "_other"

// Counter counts per operation, keeping at most max operations apart; it
// is safe for concurrent use. The zero value is not usable: use New.
type Counter struct {
	max    int
	mu     sync.Mutex
	counts map[string]uint64
}

// New returns a Counter that keeps max operations apart (max >= 1).
func New(max int) *Counter {
	return &Counter{max: max, counts: make(map[string]uint64)}
}

// Add counts one event of op.
func (c *Counter) Add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.counts[op]; !ok && len(c.counts) >= c.max {
		op = Other
	}
	c.counts[op]++
}

// Snapshot returns a copy of the counts.
func (c *Counter) Snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}
