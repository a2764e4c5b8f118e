package console

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// chartFixture posts n transfers of random amounts in random directions
// between "wallet" and "bank", and reverses transfer k of them (0-based)
// for each k in reverse, right after it. The ledger's clock steps 1 ms per
// reading, so every entry has a time of its own on SQLite too.
func chartFixture(t *testing.T, d driver.Driver, n int, reverse ...int) *ledger.Ledger {
	t.Helper()
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	var tick atomic.Int64
	l, err := ledger.New(d, ledger.Config{Clock: func() time.Time { return base.Add(time.Duration(tick.Add(1)) * time.Millisecond) }})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit: a no-op
	for _, id := range []string{"wallet", "bank"} {
		if _, err := l.CreateAccount(ctx, tx, "acme", ledger.NewAccount{ID: id, Currency: "EUR"}); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(3, uint64(n)))
	for i := range n {
		from, to := "bank", "wallet"
		if rng.IntN(2) == 0 {
			from, to = to, from
		}
		ts, err := l.Post(ctx, tx, "acme", ledger.NewTransfer{DebitAccountID: from, CreditAccountID: to, Amount: 1 + rng.Int64N(999), Currency: "EUR"})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range reverse {
			if k == i {
				if _, err := l.Reverse(ctx, tx, "acme", ledger.NewReversal{TransferID: ts[0].ID}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

func readTestChart(t *testing.T, d driver.Driver, l *ledger.Ledger, lim chartLimits) (*chart, []driver.LedgerEntry) {
	t.Helper()
	ctx := context.Background()
	c, err := New(Config{Driver: d, Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.readChart(ctx, "acme", "wallet", lim)
	if err != nil {
		t.Fatal(err)
	}
	all, err := d.LedgerEntries(ctx, d.Reader(), &driver.LedgerEntriesParams{Tenant: "acme", AccountID: "wallet",
		MaxSequence: ch.Entries, Limit: int(ch.Entries)})
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return ch, all
}

// TestChartDownsampling: a long history is drawn as its newest entries
// exactly, point by point, and the older ones in columns of equal width
// that cover them without a gap, each with the lowest and highest balance
// of its entries — except the columns older than the scan bound, which
// show their ends; reversals are marked where their entries are. On both
// drivers.
func TestChartDownsampling(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := chartFixture(t, d, 500, 100, 490)
		for _, parallel := range []int64{0, 100} {
			t.Run(fmt.Sprintf("parallel-from-%d", parallel), func(t *testing.T) {
				checkDownsampling(t, d, l, chartLimits{AllPoints: 100, Newest: 50, Columns: 30, ScanMax: 200, Markers: 10,
					ParallelMin: parallel})
			})
		}
	})
}

// checkDownsampling checks the chart of chartFixture(500, 100, 490) drawn
// within lim.
func checkDownsampling(t *testing.T, d driver.Driver, l *ledger.Ledger, lim chartLimits) {
	ch, all := readTestChart(t, d, l, lim)
	bal := func(seq int64) int64 { e := all[seq-1]; return e.CreditsPosted - e.DebitsPosted }

	const n = 502 // 500 transfers and 2 reversals
	if ch.Entries != n || len(all) != n {
		t.Fatalf("%d entries in the chart, %d read, want %d", ch.Entries, len(all), n)
	}
	// The newest 50, exactly.
	if len(ch.Points) != 50 || ch.Split != n-50 {
		t.Fatalf("%d points after entry %d, want the newest 50 after %d", len(ch.Points), ch.Split, n-50)
	}
	for i, p := range ch.Points {
		seq := ch.Split + 1 + int64(i)
		if p.Sequence != seq || p.Balance != bal(seq) || !p.CreatedAt.Equal(all[seq-1].CreatedAt) {
			t.Errorf("point %d: entry %d balance %d, want entry %d balance %d", i, p.Sequence, p.Balance, seq, bal(seq))
		}
	}
	// Columns of ceil(452/30) = 16 entries from 1 to 452; the last
	// 200 entries (and the rest of the column holding the 200th) with
	// their extremes.
	if ch.Width != 16 || len(ch.Columns) != 29 || ch.SampledTo != 240 {
		t.Fatalf("%d columns of %d, sampled up to %d; want 29 of 16, sampled up to 240", len(ch.Columns), ch.Width, ch.SampledTo)
	}
	next := int64(1)
	for i, c := range ch.Columns {
		if c.FirstSequence != next || c.LastSequence != min(next+15, ch.Split) {
			t.Fatalf("column %d spans %d..%d, want %d..%d", i, c.FirstSequence, c.LastSequence, next, min(next+15, ch.Split))
		}
		next = c.LastSequence + 1
		wantSampled := c.LastSequence <= ch.Split-lim.ScanMax
		if c.Sampled != wantSampled || (c.Sampled && c.LastSequence > ch.SampledTo) {
			t.Errorf("column %d (%d..%d): sampled %v, want %v (sampled up to %d)", i, c.FirstSequence, c.LastSequence, c.Sampled, wantSampled, ch.SampledTo)
		}
		lo, hi := min(bal(c.FirstSequence), bal(c.LastSequence)), max(bal(c.FirstSequence), bal(c.LastSequence))
		if !c.Sampled {
			for s := c.FirstSequence; s <= c.LastSequence; s++ {
				lo, hi = min(lo, bal(s)), max(hi, bal(s))
			}
		}
		if c.Min != lo || c.Max != hi || c.First != bal(c.FirstSequence) || c.Last != bal(c.LastSequence) {
			t.Errorf("column %d (%d..%d, sampled %v): min %d max %d first %d last %d, want %d %d %d %d", i,
				c.FirstSequence, c.LastSequence, c.Sampled, c.Min, c.Max, c.First, c.Last, lo, hi, bal(c.FirstSequence), bal(c.LastSequence))
		}
	}
	if next != ch.Split+1 {
		t.Errorf("the columns end at %d, want %d", next-1, ch.Split)
	}
	// The reversals: entry 102 (after transfer 101's) in the columns,
	// entry 493 among the points; each where the line passes.
	if len(ch.Markers) != 2 || ch.Markers[0].Sequence != 102 || ch.Markers[1].Sequence != 493 {
		t.Fatalf("markers %+v, want entries 102 and 493", ch.Markers)
	}
	for _, m := range ch.Markers {
		if m.Balance != bal(m.Sequence) || all[m.Sequence-1].TransferID != m.TransferID || m.ReversesID == "" {
			t.Errorf("marker %+v: entry %+v", m, all[m.Sequence-1])
		}
	}
	// The cursor on an entry stands where its point is.
	ch.setCursor(480, bal(480))
	p := ch.Points[480-ch.Split-1]
	if ch.CursorX != p.X || ch.CursorY != p.Y {
		t.Errorf("cursor at %v,%v, want entry 480's point at %v,%v", ch.CursorX, ch.CursorY, p.X, p.Y)
	}

	// Fewer markers than reversals: the newest, and a note.
	lim.Markers = 1
	ch, _ = readTestChart(t, d, l, lim)
	if len(ch.Markers) != 1 || ch.Markers[0].Sequence != 493 || !ch.MoreMarkers {
		t.Errorf("one marker: %+v (more %v), want entry 493 and more", ch.Markers, ch.MoreMarkers)
	}
}

// A short history is drawn point by point, all of it.
func TestChartShortHistory(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		l := chartFixture(t, d, 80)
		ch, all := readTestChart(t, d, l, defaultChartLimits)
		if ch.Split != 0 || len(ch.Columns) != 0 || len(ch.Points) != 80 {
			t.Fatalf("split %d, %d columns, %d points; want every entry a point", ch.Split, len(ch.Columns), len(ch.Points))
		}
		for i, p := range ch.Points {
			if p.Sequence != int64(i+1) || p.Balance != all[i].CreditsPosted-all[i].DebitsPosted {
				t.Errorf("point %d: entry %d balance %d", i, p.Sequence, p.Balance)
			}
		}
		if ch.x(0) != ch.L || ch.x(80) != ch.R {
			t.Errorf("x runs %v..%v, want the frame's %v..%v", ch.x(0), ch.x(80), ch.L, ch.R)
		}
	})
}

// With one reader connection the halves read apart take turns instead of
// waiting for each other: the page still comes, the same.
func TestChartOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "idem.db"), ReadConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l := chartFixture(t, d, 500, 100, 490)
	checkDownsampling(t, d, l, chartLimits{AllPoints: 100, Newest: 50, Columns: 30, ScanMax: 200, Markers: 10, ParallelMin: 100})
}
