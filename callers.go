package idem

import (
	"context"
	"slices"
	"sync/atomic"
)

// callers is a context of its own for work shared by several callers,
// ended once every caller that joined it has gone: one caller's hang-up
// must not fail its neighbours' work.
type callers struct {
	ctx    context.Context
	cancel context.CancelFunc
	left   atomic.Int64 // callers still there; at 0 ctx ends and nobody joins
	stops  []func() bool
	leave  func() // a caller has gone (made by the first join)
}

func newCallers(parent context.Context) *callers {
	ctx, cancel := context.WithCancel(parent)
	return &callers{ctx: ctx, cancel: cancel}
}

// join adds the callers of ctxs unless every caller that joined before
// has gone. They are counted before any can leave, so that one already
// gone does not end c's context while the others are there. It is not
// safe for concurrent use.
func (c *callers) join(ctxs ...context.Context) bool {
	for {
		n := c.left.Load()
		if n == 0 && len(c.stops) > 0 {
			return false
		}
		if c.left.CompareAndSwap(n, n+int64(len(ctxs))) {
			break
		}
	}
	if c.leave == nil {
		// One func for every caller that leaves, made once.
		c.leave = func() {
			if c.left.Add(-1) == 0 {
				c.cancel()
			}
		}
	}
	c.stops = slices.Grow(c.stops, len(ctxs))
	for _, ctx := range ctxs {
		c.stops = append(c.stops, context.AfterFunc(ctx, c.leave))
	}
	return true
}

// end lets the callers' contexts go and ends c's.
func (c *callers) end() {
	for _, stop := range c.stops {
		stop()
	}
	c.cancel()
}
