package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
)

// countedReads is a driver whose fast-path reads a test counts, and whose
// read of the broken key fails. Everything else is the real database's.
type countedReads struct {
	driver.Driver
	broken string

	mu   sync.Mutex
	gets []string // the keys of KeyGet's calls
}

var errBrokenRead = errors.New("test: this key's read fails")

func (c *countedReads) KeyGet(ctx context.Context, tx driver.Tx, p *driver.KeyGetParams) (*driver.KeyRecord, error) {
	c.mu.Lock()
	c.gets = append(c.gets, p.ID.Key)
	c.mu.Unlock()
	if p.ID.Key == c.broken {
		return nil, errBrokenRead
	}
	return c.Driver.KeyGet(ctx, tx, p)
}

// outcome is what one Do answered.
type outcome struct {
	res idem.Result
	err error
}

// A read that fails answers its request with the read's error at once:
// nothing is claimed or run, and the key stays free for the retry.
func TestFailedReadAnswersItsRequest(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		k := newKeeper(t, &countedReads{Driver: d, broken: "broken"}, idem.Config{})
		var runs atomic.Int64
		_, err := k.Do(context.Background(), req("broken", `{}`), insertWork(&runs, 201, `{}`))
		if !errors.Is(err, errBrokenRead) {
			t.Fatalf("Do: %v, want the read's error", err)
		}
		if runs.Load() != 0 || countRows(t, d, "idem_keys") != 0 || countRows(t, d, "biz") != 0 {
			t.Fatalf("after a failed read: %d runs, %d keys, %d rows; want none",
				runs.Load(), countRows(t, d, "idem_keys"), countRows(t, d, "biz"))
		}
	})
}

// Requests read their key before the claim only while enough of them find
// a record: after a window of first arrivals the next window claims
// without reading; replays in it are still answered by their claims, with
// their stored outcomes and no second run of their work; a window in which
// one request in ReadWorth found a record brings the reads back, and one
// with fewer stops them again. countedReads counts the reads.
func TestReadsOnlyWhileTheyFind(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		g := &countedReads{Driver: d}
		k := newKeeper(t, g, idem.Config{})
		ctx := context.Background()
		var runs atomic.Int64
		reads := func() int {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(g.gets)
		}
		first := func(key string) {
			t.Helper()
			res, err := k.Do(ctx, req(key, `{}`), insertWork(&runs, 201, `{"id":"`+key+`"}`))
			if err != nil || res.Replayed {
				t.Fatalf("first arrival %s: %+v, %v", key, res, err)
			}
		}
		replay := func(key string) {
			t.Helper()
			res, err := k.Do(ctx, req(key, `{}`), insertWork(&runs, 201, `{"again":true}`))
			if err != nil || !res.Replayed || res.Status != 201 || string(res.Body) != `{"id":"`+key+`"}` {
				t.Fatalf("replay %s: %+v, %v", key, res, err)
			}
		}
		// window runs a window of requests, the first replays of them
		// replays of a's keys and the rest first arrivals, and checks how
		// many of them read first.
		window := func(name string, replays int, wantReads int) {
			t.Helper()
			before, ran := reads(), runs.Load()
			for i := range idem.ReadWindow {
				if i < replays {
					replay(fmt.Sprintf("a-%d", i))
				} else {
					first(fmt.Sprintf("%s-%d", name, i))
				}
			}
			if got := reads() - before; got != wantReads {
				t.Fatalf("window %s: %d reads, want %d", name, got, wantReads)
			}
			if got, want := runs.Load()-ran, int64(idem.ReadWindow-replays); got != want {
				t.Fatalf("window %s: the work ran %d times, want %d", name, got, want)
			}
		}
		w, share := idem.ReadWindow, idem.ReadWindow/idem.ReadWorth
		window("a", 0, w)       // a new keeper reads first; nothing found
		window("b", 0, 0)       // so the next window does not read
		window("c", share, 0)   // its replays are found by their claims
		window("d", share-1, w) // one in ReadWorth found: reads are back
		window("e", 0, 0)       // one fewer: they stop again
		if got, want := countRows(t, d, "biz"), 5*w-2*share+1; got != want {
			t.Fatalf("biz rows %d, want %d", got, want)
		}
		if got, want := countRows(t, d, "idem_keys"), 5*w-2*share+1; got != want {
			t.Fatalf("idem_keys rows %d, want %d", got, want)
		}
	})
}

// writerBound is countedReads on a driver that says its writers are
// bounded, as SQLite's is (one).
type writerBound struct{ *countedReads }

func (writerBound) Writers() int { return 1 }

// Where claims queue for a bounded set of writers, requests always read
// first: two windows of first arrivals, then replays, all read.
func TestReadsAlwaysWhereWritersAreBounded(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		c := &countedReads{Driver: d}
		k := newKeeper(t, writerBound{c}, idem.Config{})
		var runs atomic.Int64
		n := 2*idem.ReadWindow + 10
		for i := range n {
			if _, err := k.Do(context.Background(), req(fmt.Sprintf("k-%d", i), `{}`), insertWork(&runs, 201, `{}`)); err != nil {
				t.Fatal(err)
			}
		}
		res, err := k.Do(context.Background(), req("k-0", `{}`), insertWork(&runs, 201, `{}`))
		if err != nil || !res.Replayed {
			t.Fatalf("replay: %+v, %v", res, err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.gets) != n+1 || runs.Load() != int64(n) {
			t.Fatalf("%d reads and %d runs for %d first arrivals and a replay, want %d and %d", len(c.gets), runs.Load(), n, n+1, n)
		}
	})
}
