package console

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/inspect"
)

// The outbox flow (/ui/outbox): the backlog and how long messages wait
// between commit and publish over the last hour, sampled in memory by a
// goroutine of the console (Run); the dead letters grouped by ordering
// key, each letter and each group redriven after a confirmation.

const (
	defaultSampleInterval = 10 * time.Second
	minSampleInterval     = time.Second
	maxSampleInterval     = time.Minute
	// flowHistory is how far back the charts go.
	flowHistory = time.Hour
	// sampleTimeout bounds one sample's database work.
	sampleTimeout = 5 * time.Second
)

// flowSample is the outbox at one moment, as the sampler saw it.
type flowSample struct {
	At time.Time
	// OK is false when the sample failed (the database did not answer):
	// the charts leave a gap.
	OK bool
	// Pending counts the messages not yet published; OldestAge is how
	// long the oldest of them has waited since its commit.
	Pending   int64
	OldestAge time.Duration
	Dead      int64
	// Published counts the messages published since the previous
	// sample, and Slowest is the longest commit-to-publish time among
	// them.
	Published int64
	Slowest   time.Duration
}

// flowSampler keeps the newest samples, an hour's worth, in a ring. It
// lives in memory only: the history starts when the process starts.
type flowSampler struct {
	mu      sync.Mutex
	started time.Time
	ring    []flowSample
	next    int
	// last is when the previous sample was taken: the next one counts the
	// messages published since.
	last time.Time
}

func newFlowSampler(interval time.Duration, now time.Time) *flowSampler {
	size := int(flowHistory/interval) + 1
	return &flowSampler{started: now, ring: make([]flowSample, 0, size)}
}

func (s *flowSampler) add(x flowSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, x)
	} else {
		s.ring[s.next] = x
		s.next = (s.next + 1) % len(s.ring)
	}
	if x.OK {
		s.last = x.At
	}
}

// samples returns the kept samples, oldest first.
func (s *flowSampler) samples() []flowSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]flowSample, 0, len(s.ring))
	for i := range s.ring {
		out = append(out, s.ring[(s.next+i)%len(s.ring)])
	}
	return out
}

func (s *flowSampler) previous() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Run samples the outbox for the outbox page's charts, at once and then
// every Config.SampleInterval, until ctx is done; then it returns nil.
// The samples are kept in memory only, an hour of them: run it for the
// life of the service (the server runs it beside its HTTP server). Without
// an outbox it returns at once.
func (c *Console) Run(ctx context.Context) error {
	if c.cfg.Outbox == nil {
		return nil
	}
	tick := time.NewTicker(c.cfg.SampleInterval)
	defer tick.Stop()
	for {
		c.sample(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// sample takes one sample. A failure is kept as a gap and logged; it
// never stops the sampler.
func (c *Console) sample(ctx context.Context) {
	if c.cfg.Outbox == nil {
		return
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	now := c.cfg.Clock().UTC()
	x := flowSample{At: now}
	err := func() error {
		st, err := c.cfg.Outbox.Stats(ctx)
		if err != nil {
			return err
		}
		x.Pending, x.OldestAge, x.Dead = st.Pending, st.OldestAge(now), st.Dead
		since := c.flow.previous()
		if since.IsZero() || now.Sub(since) > 2*c.cfg.SampleInterval {
			since = now.Add(-c.cfg.SampleInterval)
		}
		pub, err := c.cfg.Driver.OutboxPublished(ctx, c.cfg.Driver.Reader(), &driver.OutboxPublishedParams{After: since, Until: now})
		if err != nil {
			return err
		}
		x.Published, x.Slowest = pub.Count, pub.Slowest
		return nil
	}()
	switch {
	case parent.Err() != nil:
		return // stopping: no sample, not a gap
	case err != nil:
		c.cfg.Logger.Warn("console: outbox sample failed", "err", err)
	default:
		x.OK = true
	}
	c.flow.add(x)
}

// flowChart is a small line chart over the last hour, drawn by the template
// as SVG from these precomputed coordinates.
type flowChart struct {
	ID, Title string
	Width     int
	Height    int
	// Left, Right, Top and Bottom bound the plot area.
	Left, Right, Top, Bottom int
	MaxLabel                 string
	Series                   []chartSeries
	// Ticks are the time axis' labels.
	Ticks []flowTick
}

type chartSeries struct {
	Name, Class string
	// Path is the line through the points, broken where a sample failed.
	Path   string
	Points []flowPoint
}

type flowPoint struct {
	X, Y  float64
	Value float64
	Label string
}

type flowTick struct {
	X     float64
	Label string
	// Anchor is the label's text-anchor: "end" for the last, at the plot's
	// right edge, so that it ends there instead of past the picture's.
	Anchor string
}

// chartValue reads one series' value of a sample, as a number and as
// text.
type chartValue struct {
	name, class string
	value       func(flowSample) float64
	format      func(float64) string
}

// chartScale rounds a chart's highest value up to its top, and writes it.
type chartScale struct {
	ceiling func(float64) float64
	format  func(float64) string
}

var (
	countScale   = chartScale{niceCeiling, countText}
	secondsScale = chartScale{niceSeconds, secondsText}
)

func newChart(id, title string, samples []flowSample, now time.Time, scale chartScale, values ...chartValue) flowChart {
	ch := flowChart{ID: id, Title: title, Width: 640, Height: 170, Left: 64, Right: 628, Top: 24, Bottom: 146}
	from := now.Add(-flowHistory)
	top := 0.0
	for _, s := range samples {
		for _, v := range values {
			if s.OK && !s.At.Before(from) {
				top = max(top, v.value(s))
			}
		}
	}
	top = scale.ceiling(top)
	ch.MaxLabel = scale.format(top)
	w, h := float64(ch.Right-ch.Left), float64(ch.Bottom-ch.Top)
	x := func(t time.Time) float64 {
		return round1(float64(ch.Left) + w*float64(t.Sub(from))/float64(flowHistory))
	}
	for _, v := range values {
		se := chartSeries{Name: v.name, Class: v.class}
		pen := "M"
		for _, s := range samples {
			if s.At.Before(from) {
				continue
			}
			if !s.OK {
				pen = "M"
				continue
			}
			val := v.value(s)
			p := flowPoint{X: x(s.At), Y: round1(float64(ch.Bottom) - h*val/top), Value: val,
				Label: inspect.Time(s.At) + ": " + v.format(val)}
			se.Points = append(se.Points, p)
			se.Path += fmt.Sprintf("%s%g %g ", pen, p.X, p.Y)
			pen = "L"
		}
		ch.Series = append(ch.Series, se)
	}
	for _, back := range []time.Duration{60 * time.Minute, 45 * time.Minute, 30 * time.Minute, 15 * time.Minute, 0} {
		label := "now"
		if back > 0 {
			label = "−" + strconv.Itoa(int(back/time.Minute)) + " min"
		}
		anchor := "middle"
		if back == 0 {
			anchor = "end"
		}
		ch.Ticks = append(ch.Ticks, flowTick{X: x(now.Add(-back)), Label: label, Anchor: anchor})
	}
	return ch
}

// niceCeiling rounds a chart's top up to 1, 2 or 5 times a power of ten,
// and at least 1.
func niceCeiling(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// niceSeconds rounds a number of seconds up to a duration people count
// in: 1, 2, 5, 10, 15 or 30 seconds or minutes, 1, 2, 3, 6 or 12 hours,
// then whole days.
func niceSeconds(v float64) float64 {
	for _, step := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400} {
		if v <= step {
			return step
		}
	}
	return math.Ceil(v/86400) * 86400
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func countText(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func secondsText(v float64) string {
	return humanDuration(time.Duration(v * float64(time.Second)))
}

// deadGroup is the dead letters of one ordering key.
type deadGroup struct {
	Tenant, Key    string
	Letters        []inspect.DeadLetter
	Oldest, Newest time.Time
	// LastError is the newest letter's.
	LastError string
}

// groupDead groups dead letters by tenant and ordering key, the group
// whose oldest letter died first first.
func groupDead(dead []inspect.DeadLetter) []deadGroup {
	index := map[[2]string]int{}
	var out []deadGroup
	for _, d := range dead {
		k := [2]string{d.Tenant, d.Key}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, deadGroup{Tenant: d.Tenant, Key: d.Key, Oldest: d.DeadAt, Newest: d.DeadAt, LastError: d.LastError})
		}
		g := &out[i]
		g.Letters = append(g.Letters, d)
		if d.DeadAt.Before(g.Oldest) {
			g.Oldest = d.DeadAt
		}
		if !d.DeadAt.Before(g.Newest) {
			g.Newest, g.LastError = d.DeadAt, d.LastError
		}
	}
	slices.SortStableFunc(out, func(a, b deadGroup) int { return a.Oldest.Compare(b.Oldest) })
	return out
}

func (c *Console) outbox(w http.ResponseWriter, r *http.Request) {
	now := c.cfg.Clock().UTC()
	q := r.URL.Query()
	data := map[string]any{"Now": now, "Available": c.cfg.Outbox != nil, "Redriven": q.Get("redriven"),
		"RedrivenKey": q.Get("redriven_key"), "RedrivenTenant": q.Get("redriven_tenant"), "RedrivenCount": q.Get("redriven_count")}
	if c.cfg.Outbox == nil {
		c.render(w, r, http.StatusOK, "outbox", data)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	stats, err := c.cfg.Outbox.Stats(ctx)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	dead, err := c.cfg.Outbox.ListDead(ctx, inspect.MaxDeadLetters)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	samples := c.flow.samples()
	data["Stats"], data["OldestAge"] = stats, stats.OldestAge(now).Round(time.Second)
	data["Groups"], data["DeadListed"], data["DeadCapped"] = groupDead(dead), len(dead), len(dead) == inspect.MaxDeadLetters
	data["Samples"], data["SampledSince"], data["SampleEvery"] = samples, c.flow.started, c.cfg.SampleInterval
	data["Backlog"] = newChart("chart-backlog", "Backlog: messages waiting to be published", samples, now, countScale,
		chartValue{"pending", "series-a", func(s flowSample) float64 { return float64(s.Pending) }, countText})
	data["Age"] = newChart("chart-age", "Commit → publish: how long messages wait", samples, now, secondsScale,
		chartValue{"oldest waiting", "series-a", func(s flowSample) float64 { return s.OldestAge.Seconds() }, secondsText},
		chartValue{"slowest published", "series-b", func(s flowSample) float64 { return s.Slowest.Seconds() }, secondsText})
	c.render(w, r, http.StatusOK, "outbox", data)
}

// redrive makes dead letters live again: one (id), or every dead letter
// of an ordering key (tenant and key). A post without confirm=1 answers
// the confirmation page, whose form posts again with it.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Outbox == nil {
		c.message(w, r, http.StatusNotFound, "Outbox not available", "This service has no outbox to redrive.")
		return
	}
	f := r.PostForm
	id, tenant, key := f.Get("id"), f.Get("tenant"), f.Get("key")
	if (id == "" && key == "") || len(id) > maxParamBytes || len(tenant) > maxParamBytes || len(key) > maxParamBytes {
		c.message(w, r, http.StatusBadRequest, "Bad request", "Name the dead letter, or the tenant and key of the dead letters, to redrive.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	dead, err := c.cfg.Outbox.ListDead(ctx, inspect.MaxDeadLetters)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	var letters []inspect.DeadLetter
	for _, d := range dead {
		if (id != "" && d.ID == id) || (id == "" && d.Tenant == tenant && d.Key == key) {
			letters = append(letters, d)
		}
	}
	if id != "" && len(letters) == 0 {
		// Listed or not (the list stops at the oldest MaxDeadLetters),
		// the outbox decides: it refuses an id that is no dead letter.
		letters = []inspect.DeadLetter{{ID: id}}
	}
	if len(letters) == 0 {
		c.message(w, r, http.StatusNotFound, "No such dead letters",
			"Key "+key+" of tenant "+tenant+" has no dead letters: they may have been redriven already.")
		return
	}
	if f.Get("confirm") != "1" {
		c.render(w, r, http.StatusOK, "redrive", map[string]any{"ID": id, "Tenant": tenant, "Key": key,
			"Letters": letters, "Now": c.cfg.Clock().UTC()})
		return
	}
	n := 0
	for _, d := range letters {
		err := c.cfg.Outbox.Redrive(ctx, d.ID)
		switch {
		case errors.Is(err, inspect.ErrDeadLetterNotFound) && id == "":
			continue // redriven meanwhile: the group's others still go
		case errors.Is(err, inspect.ErrDeadLetterNotFound):
			c.message(w, r, http.StatusNotFound, "No such dead letter",
				"Message "+id+" is not a dead letter: it may have been redriven already.")
			return
		case err != nil:
			c.fail(w, r, err)
			return
		}
		n++
		c.cfg.Logger.Info("console: dead letter redriven", "id", d.ID, "tenant", d.Tenant, "key", clip(d.Key))
	}
	if id != "" {
		http.Redirect(w, r, "/ui/outbox?"+url.Values{"redriven": {id}}.Encode(), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/ui/outbox?"+url.Values{"redriven_key": {key}, "redriven_tenant": {tenant},
		"redriven_count": {strconv.Itoa(n)}}.Encode(), http.StatusSeeOther)
}
