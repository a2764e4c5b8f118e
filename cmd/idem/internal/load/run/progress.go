package run

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress reports a run's progress: a bar redrawn in place on a terminal,
// a plain line every few seconds otherwise.
type Progress struct {
	w     io.Writer
	bar   bool
	st    *Stats
	mu    sync.Mutex
	name  string
	unit  string
	total int
	count *atomic.Int64 // what the phase counts
	base  int64
	start time.Time
	stopc chan struct{}
	done  chan struct{}
}

// NewProgress reports to w (nil: nowhere), as a bar when bar is set.
func NewProgress(w io.Writer, bar bool, st *Stats) *Progress {
	return &Progress{w: w, bar: bar, st: st}
}

// Phase starts reporting a phase of total operations acknowledged (0: no
// total).
func (p *Progress) Phase(name string, total int) { p.PhaseOf(name, "ops", total, &p.st.Done) }

// PhaseOf starts reporting a phase of total units (named unit) counted by
// count.
func (p *Progress) PhaseOf(name, unit string, total int, count *atomic.Int64) {
	if p.w == nil {
		return
	}
	p.Stop()
	p.mu.Lock()
	p.name, p.unit, p.total, p.count, p.base, p.start = name, unit, total, count, count.Load(), time.Now()
	p.stopc, p.done = make(chan struct{}), make(chan struct{})
	stopc, done := p.stopc, p.done
	p.mu.Unlock()
	every := 2 * time.Second
	if p.bar {
		every = 200 * time.Millisecond
	}
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stopc:
				p.draw(true)
				return
			case <-t.C:
				p.draw(false)
			}
		}
	}()
}

// Stop ends the current phase's reporting.
func (p *Progress) Stop() {
	p.mu.Lock()
	stopc, done := p.stopc, p.done
	p.stopc, p.done = nil, nil
	p.mu.Unlock()
	if stopc != nil {
		close(stopc)
		<-done
	}
}

func (p *Progress) draw(final bool) {
	p.mu.Lock()
	name, unit, total, count, base, start := p.name, p.unit, p.total, p.count, p.base, p.start
	p.mu.Unlock()
	fmt.Fprint(p.w, progressLine(p.bar, final, name, unit, int(count.Load()-base), total, time.Since(start), p.counts()))
}

// counts are the run's counters, as every progress line shows them.
func (p *Progress) counts() string {
	return fmt.Sprintf("%d req, %d dup, %d replayed, %d retries, %d violations",
		p.st.Requests.Load(), p.st.Duplicates.Load(), p.st.Replays.Load(), p.st.Retries.Load(), p.st.ViolationCount())
}

// progressLine is one progress report: done of total units after elapsed,
// with the time left at the rate so far, as a bar redrawn in place or as
// a line.
func progressLine(bar, final bool, name, unit string, done, total int, elapsed time.Duration, counts string) string {
	end := "\n"
	if bar && !final {
		end = ""
	}
	if total <= 0 {
		if bar {
			return fmt.Sprintf("\r\033[K%-9s %s%s", name, counts, end)
		}
		return fmt.Sprintf("load: %s, %s\n", name, counts)
	}
	rate := ""
	if s := elapsed.Seconds(); done > 0 && s > 0 {
		rate = fmt.Sprintf(", %.0f %s/s", float64(done)/s, unit)
		if left := timeLeft(done, total, elapsed); left > 0 && !final {
			rate += fmt.Sprintf(", %s left", left)
		}
	}
	if !bar {
		return fmt.Sprintf("load: %s %d/%d %s%s, %s\n", name, done, total, unit, rate, counts)
	}
	const width = 30
	filled := min(width, done*width/total)
	return fmt.Sprintf("\r\033[K%-9s [%s%s] %d/%d %s%s, %s%s", name, strings.Repeat("#", filled),
		strings.Repeat(".", width-filled), done, total, unit, rate, counts, end)
}

// timeLeft estimates the time the rest of total takes at the rate of the
// done units so far (0 when nothing is done yet, or everything),
// rounded to the second.
func timeLeft(done, total int, elapsed time.Duration) time.Duration {
	if done <= 0 || done >= total {
		return 0
	}
	left := time.Duration(float64(elapsed) * float64(total-done) / float64(done))
	return max(left.Round(time.Second), time.Second)
}
