package console

// The account page's chart: the balance after each of the account's
// entries, drawn on the server as SVG (the script only adds a readout
// where the pointer is). The x axis counts entries, not time: a burst of
// transfers gets as much room as a quiet month.
//
// A long history cannot be drawn entry by entry, and must not be read
// entry by entry either: the newest entries are plotted point by point,
// and the older ones in columns, each the lowest and highest balance of a
// run of consecutive entries, aggregated by the database
// (driver.LedgerBalanceBuckets). At one column per pixel, drawing each
// column's lowest-to-highest line is what drawing every entry would show.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/internal/money"
)

// chartLimits bound what a chart draws and reads.
type chartLimits struct {
	// AllPoints: a history up to this many entries is drawn point by
	// point.
	AllPoints int64
	// Newest: a longer one draws its newest entries point by point, on
	// the right of the chart, and the older ones in at most Columns
	// columns.
	Newest, Columns int64
	// ScanMax bounds the entries read for the columns' lowest and highest
	// balances: that many before the newest points (rounded to a whole
	// column). Columns further back show their first and last entries
	// only (two lookups each), so an account of any length costs at most
	// one read of about this many entries.
	ScanMax int64
	// Markers bounds the reversals marked, newest first.
	Markers int
	// ParallelMin: a run of at least this many entries read with their
	// extremes is read in two halves at once, on two connections (0:
	// never).
	ParallelMin int64
}

// defaultChartLimits: 600 columns and 200 points fill the chart's width
// at about one column per pixel on a laptop's screen; a million entries
// are read in about 250 ms (docs/operations-console.md); below 100,000
// entries a second connection is not worth taking.
var defaultChartLimits = chartLimits{AllPoints: 600, Newest: 200, Columns: 600, ScanMax: 1_000_000, Markers: 100,
	ParallelMin: 100_000}

// The chart's geometry, in the SVG's own units; the style sheet scales it
// to the page's width.
const (
	chartWidth  = 960
	chartHeight = 300
	chartLeft   = 12
	chartRight  = 946
	chartTop    = 16
	chartBottom = 262
	// chartSplitAt is the share of the width the columns take when the
	// newest entries are drawn apart.
	chartSplitAt = 0.62
)

// px is a coordinate, written with one decimal: enough at the chart's
// scale, and it keeps the page small.
type px float64

func (p px) String() string { return strconv.FormatFloat(float64(p), 'f', 1, 64) }

// chart is what the account template draws.
type chart struct {
	Limits   chartLimits
	Currency string
	// Entries is the account's number of entries when the chart was read.
	Entries int64
	// Split is the last entry drawn in columns (0: every entry is a point),
	// Width the entries per column, and SampledTo the last entry of the
	// columns that show their ends only (0: every column is complete).
	Split, Width, SampledTo int64
	Columns                 []chartColumn
	Points                  []chartPoint
	Markers                 []chartMarker
	// MoreMarkers: older reversals than the markers exist, unmarked.
	MoreMarkers bool
	// Line is the polyline through the balance, oldest first.
	Line  string
	Ticks []chartTick
	// Lo and Hi are the balances at the bottom and top of the plot.
	Lo, Hi float64
	// FirstAt and LastAt are the times of the first and newest entries.
	FirstAt, LastAt time.Time
	// The cursor: the entry the figures beside the chart are as of.
	CursorSeq        int64
	CursorX, CursorY px
	// FirstX is where entry 1 is drawn, which the axis's "#1" names.
	FirstX px
	// The frame, for the template and the script.
	W, H, L, R, S, Top, Bottom px
}

// chartColumn is a run of consecutive entries drawn as one vertical line
// from its lowest to its highest balance.
type chartColumn struct {
	driver.LedgerBalanceBucket
	// Sampled: only the first and last entries were read (the run is older
	// than Limits.ScanMax entries), so Min and Max are theirs.
	Sampled              bool
	X, YMin, YMax, YLast px
	Label                string
}

// chartPoint is one entry.
type chartPoint struct {
	driver.LedgerEntry
	Balance int64
	X, Y    px
	Label   string
}

// chartMarker is a reversal's entry, linked to the transfer it reverses.
type chartMarker struct {
	driver.LedgerReversalEntry
	X, Y  px
	Label string
}

// chartTick is a labelled horizontal line.
type chartTick struct {
	Y     px
	Label string
}

// readChart reads an account's chart. It reads in snapshots of its own,
// after the page's as-of read: entries never change, so the chart holds
// every entry that read saw, and its long read never runs in the
// read-write transaction a recent moment needs (on SQLite, the one
// writer's).
func (c *Console) readChart(ctx context.Context, tenant, accountID string, lim chartLimits) (*chart, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ch *chart
	var older chan columnsRead // the older half of the columns, when read apart
	err := inspect.Snapshot(ctx, c.cfg.Driver, func(tx driver.Tx) (err error) {
		ch, older, err = c.readChartIn(ctx, tx, tenant, accountID, lim)
		return err
	})
	if older != nil {
		// Waited for only once the snapshot above is closed: with one
		// free connection, the other half runs after it.
		if err != nil {
			cancel()
		}
		r := <-older
		switch {
		case err != nil:
		case r.err != nil:
			err = fmt.Errorf("console: chart of %q: %w", accountID, r.err)
		default:
			ch.Columns = append(r.columns, ch.Columns...)
		}
	}
	if err != nil {
		return nil, err
	}
	ch.layout(c.cfg.Currencies)
	return ch, nil
}

// columnsRead is the outcome of reading columns apart.
type columnsRead struct {
	columns []chartColumn
	err     error
}

// readChartIn reads everything in tx but, for a long run of columns, their
// older half, which it starts reading in a snapshot of its own: the
// entries up to Split were committed before tx saw the account's newest,
// and never change, so a transaction begun now reads the same ones, and
// two connections (two cores) walk the entries in about half the time.
func (c *Console) readChartIn(ctx context.Context, tx driver.Tx, tenant, accountID string, lim chartLimits) (*chart, chan columnsRead, error) {
	d := c.cfg.Driver
	acct, err := d.LedgerAccountGet(ctx, tx, &driver.LedgerAccountGetParams{Tenant: tenant, ID: accountID})
	if err != nil {
		return nil, nil, fmt.Errorf("console: chart of %q: %w", accountID, err)
	}
	ch := &chart{Limits: lim, Currency: acct.Currency, Entries: acct.Sequence}
	n := acct.Sequence
	if n == 0 {
		return ch, nil, nil
	}
	exact := n
	if n > lim.AllPoints {
		exact = lim.Newest
		ch.Split = n - exact
	}
	var older chan columnsRead
	if ch.Split > 0 {
		if older, err = ch.readColumns(ctx, d, tx, tenant, accountID); err != nil {
			return nil, older, fmt.Errorf("console: chart of %q: %w", accountID, err)
		}
	}
	newest, err := d.LedgerEntries(ctx, tx, &driver.LedgerEntriesParams{Tenant: tenant, AccountID: accountID,
		MaxSequence: n, Limit: int(exact)})
	if err != nil {
		return nil, older, fmt.Errorf("console: chart of %q: %w", accountID, err)
	}
	ch.Points = make([]chartPoint, len(newest))
	for i, e := range newest {
		ch.Points[len(newest)-1-i] = chartPoint{LedgerEntry: e, Balance: e.CreditsPosted - e.DebitsPosted}
	}
	revs, err := d.LedgerAccountReversals(ctx, tx, &driver.LedgerAccountReversalsParams{Tenant: tenant, AccountID: accountID,
		MaxSequence: n, Limit: lim.Markers + 1})
	if err != nil {
		return nil, older, fmt.Errorf("console: reversals of %q: %w", accountID, err)
	}
	if len(revs) > lim.Markers {
		revs, ch.MoreMarkers = revs[:lim.Markers], true
	}
	for i := len(revs) - 1; i >= 0; i-- {
		ch.Markers = append(ch.Markers, chartMarker{LedgerReversalEntry: revs[i]})
	}
	return ch, older, nil
}

// readColumns reads entries 1..Split in columns of equal width: the
// newest Limits.ScanMax of them with their extremes, the older ones by
// their ends. Both reads use the same grid, so the columns line up. A run
// of at least Limits.ParallelMin entries with extremes is read in two
// halves at once: the older one in a snapshot of its own, returned on the
// channel (see readChartIn); ch.Columns then holds the newer half only.
func (ch *chart) readColumns(ctx context.Context, d driver.Driver, tx driver.Tx, tenant, accountID string) (chan columnsRead, error) {
	lim := ch.Limits
	ch.Width = (ch.Split + lim.Columns - 1) / lim.Columns
	full := int64(1) // the first entry read with its column's extremes
	var ends []chartColumn
	if ch.Split > lim.ScanMax {
		// The newest ScanMax entries, and the rest of the column holding
		// the oldest of them.
		full = 1 + (ch.Split-lim.ScanMax)/ch.Width*ch.Width
		ch.SampledTo = full - 1
		bs, err := d.LedgerBalanceBuckets(ctx, tx, &driver.LedgerBalanceBucketsParams{Tenant: tenant, AccountID: accountID,
			First: 1, Last: ch.SampledTo, Width: ch.Width})
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			ends = append(ends, chartColumn{LedgerBalanceBucket: b, Sampled: true})
		}
	}
	if full > ch.Split {
		ch.Columns = ends
		return nil, nil
	}
	p := driver.LedgerBalanceBucketsParams{Tenant: tenant, AccountID: accountID, First: full, Last: ch.Split,
		Width: ch.Width, Extremes: true}
	var older chan columnsRead
	if lim.ParallelMin > 0 && ch.Split-full+1 >= lim.ParallelMin && ch.Split-full+1 > 2*ch.Width {
		half := p
		p.First = full + (ch.Split-full+1)/ch.Width/2*ch.Width // the newer half's first column
		half.Last = p.First - 1
		older = make(chan columnsRead, 1)
		sampled := ends
		go func() {
			r := columnsRead{columns: sampled}
			r.err = inspect.Snapshot(ctx, d, func(tx driver.Tx) error {
				bs, err := d.LedgerBalanceBuckets(ctx, tx, &half)
				for _, b := range bs {
					r.columns = append(r.columns, chartColumn{LedgerBalanceBucket: b})
				}
				return err
			})
			older <- r
		}()
		ends = nil
	}
	bs, err := d.LedgerBalanceBuckets(ctx, tx, &p)
	if err != nil {
		return older, err
	}
	ch.Columns = ends
	for _, b := range bs {
		ch.Columns = append(ch.Columns, chartColumn{LedgerBalanceBucket: b})
	}
	return older, nil
}

// x is where the balance after entry seq is drawn (seq 0: before the
// first entry). Every entry gets the same width, except that the columns
// share chartSplitAt of the chart and the newest entries the rest. The
// script computes the same from the SVG's data attributes.
func (ch *chart) x(seq float64) px {
	n, split := float64(ch.Entries), float64(ch.Split)
	switch {
	case n == 0:
		return ch.L
	case ch.Split == 0:
		return ch.L + px(seq/n)*(ch.R-ch.L)
	case seq <= split:
		return ch.L + px(seq/split)*(ch.S-ch.L)
	}
	return ch.S + px((seq-split)/(n-split))*(ch.R-ch.S)
}

// y is where a balance is drawn.
func (ch *chart) y(balance int64) px {
	return ch.Top + px((ch.Hi-float64(balance))/(ch.Hi-ch.Lo))*(ch.Bottom-ch.Top)
}

// layout places everything read, and the labels people read.
func (ch *chart) layout(cur *money.Currencies) {
	ch.W, ch.H, ch.L, ch.R, ch.Top, ch.Bottom = chartWidth, chartHeight, chartLeft, chartRight, chartTop, chartBottom
	ch.S = ch.R
	if ch.Split > 0 {
		ch.S = ch.L + chartSplitAt*(ch.R-ch.L)
	}
	// The vertical range holds 0 (the balance before the first entry)
	// and every balance drawn, with a little room above and below.
	lo, hi := int64(0), int64(0)
	for _, c := range ch.Columns {
		lo, hi = min(lo, c.Min), max(hi, c.Max)
	}
	for _, p := range ch.Points {
		lo, hi = min(lo, p.Balance), max(hi, p.Balance)
	}
	pad := float64(hi-lo) * 0.06
	if pad == 0 {
		pad = 1
	}
	ch.Lo, ch.Hi = float64(lo)-pad, float64(hi)+pad
	ticks := []int64{hi}
	if lo != hi {
		ticks = append(ticks, lo)
	}
	if lo < 0 && hi > 0 {
		ticks = append(ticks, 0)
	}
	for _, v := range ticks {
		ch.Ticks = append(ch.Ticks, chartTick{Y: ch.y(v), Label: majorAmount(cur, v, ch.Currency)})
	}

	var line strings.Builder
	fmt.Fprintf(&line, "%s,%s", ch.x(0), ch.y(0))
	for i := range ch.Columns {
		c := &ch.Columns[i]
		c.X = ch.x(float64(c.LastSequence))
		c.YMin, c.YMax, c.YLast = ch.y(c.Min), ch.y(c.Max), ch.y(c.Last)
		fmt.Fprintf(&line, " %s,%s %s,%s", c.X, ch.y(c.First), c.X, c.YLast)
		c.Label = columnLabel(cur, c, ch.Currency, ch.Limits.ScanMax)
	}
	for i := range ch.Points {
		p := &ch.Points[i]
		p.X, p.Y = ch.x(float64(p.Sequence)), ch.y(p.Balance)
		fmt.Fprintf(&line, " %s,%s", p.X, p.Y)
		side := "debit"
		if p.Credit {
			side = "credit"
		}
		p.Label = fmt.Sprintf("entry %s · %s · %s %s · balance %s", Count(p.Sequence), inspect.Time(p.CreatedAt),
			side, cur.Format(p.Amount, ch.Currency), cur.Format(p.Balance, ch.Currency))
	}
	ch.Line = line.String()
	for i := range ch.Markers {
		m := &ch.Markers[i]
		m.X, m.Y = ch.x(float64(m.Sequence)), ch.y(m.Balance)
		m.Label = fmt.Sprintf("entry %s: reversal %s of transfer %s · %s · balance %s (open the reversed transfer)",
			Count(m.Sequence), ShortID(m.TransferID), ShortID(m.ReversesID), inspect.Time(m.CreatedAt),
			cur.Format(m.Balance, ch.Currency))
	}
	if len(ch.Columns) > 0 {
		ch.FirstAt = ch.Columns[0].FirstAt
	} else if len(ch.Points) > 0 {
		ch.FirstAt = ch.Points[0].CreatedAt
	}
	if len(ch.Points) > 0 {
		ch.LastAt = ch.Points[len(ch.Points)-1].CreatedAt
	}
	ch.FirstX = ch.x(1)
	ch.setCursor(ch.Entries, 0)
}

// setCursor puts the cursor after entry seq, at the balance the ledger
// believed then.
func (ch *chart) setCursor(seq, balance int64) {
	ch.CursorSeq, ch.CursorX = seq, ch.x(float64(seq))
	if ch.Hi > ch.Lo {
		ch.CursorY = ch.y(balance)
	}
}

// PointRadius keeps points apart when there are many and visible when
// there are few.
func (ch *chart) PointRadius() px {
	if len(ch.Points) == 0 {
		return 0
	}
	span := float64(ch.R-ch.S) / float64(len(ch.Points))
	if ch.Split == 0 {
		span = float64(ch.R-ch.L) / float64(len(ch.Points))
	}
	return px(min(max(span/2.5, 1.5), 4.5))
}

func columnLabel(cur *money.Currencies, c *chartColumn, currency string, scanMax int64) string {
	span := fmt.Sprintf("entries %s–%s · until %s", Count(c.FirstSequence), Count(c.LastSequence), inspect.Time(c.LastAt))
	if c.Sampled {
		return fmt.Sprintf("%s · first %s, last %s (older than the newest %s entries: only the ends are read)", span,
			cur.Format(c.First, currency), cur.Format(c.Last, currency), Count(scanMax))
	}
	return fmt.Sprintf("%s · lowest %s, highest %s, last %s", span,
		cur.Format(c.Min, currency), cur.Format(c.Max, currency), cur.Format(c.Last, currency))
}

// majorAmount is an amount in major units without the stored integer, for
// the chart's scale: "12.50 EUR".
func majorAmount(cur *money.Currencies, amount int64, code string) string {
	e, ok := cur.Exponent(code)
	if !ok {
		return strconv.FormatInt(amount, 10) + " " + code
	}
	s, _ := money.Major(amount, e) // a known exponent is within bounds
	return s + " " + code
}
