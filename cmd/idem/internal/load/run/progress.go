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
	total int
	count *atomic.Int64 // what the phase counts
	base  int64
	stopc chan struct{}
	done  chan struct{}
}

// NewProgress reports to w (nil: nowhere), as a bar when bar is set.
func NewProgress(w io.Writer, bar bool, st *Stats) *Progress {
	return &Progress{w: w, bar: bar, st: st}
}

// Phase starts reporting a phase of total operations acknowledged (0: no
// total).
func (p *Progress) Phase(name string, total int) { p.PhaseOf(name, total, &p.st.Done) }

// PhaseOf starts reporting a phase of total units counted by count.
func (p *Progress) PhaseOf(name string, total int, count *atomic.Int64) {
	if p.w == nil {
		return
	}
	p.Stop()
	p.mu.Lock()
	p.name, p.total, p.count, p.base = name, total, count, count.Load()
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
	name, total, count, base := p.name, p.total, p.count, p.base
	p.mu.Unlock()
	done := int(count.Load() - base)
	counts := fmt.Sprintf("%d req, %d dup, %d replayed, %d retries, %d violations",
		p.st.Requests.Load(), p.st.Duplicates.Load(), p.st.Replays.Load(), p.st.Retries.Load(), p.st.ViolationCount())
	if !p.bar {
		if total > 0 {
			fmt.Fprintf(p.w, "load: %s %d/%d ops, %s\n", name, done, total, counts)
		} else {
			fmt.Fprintf(p.w, "load: %s, %s\n", name, counts)
		}
		return
	}
	const width = 30
	line := fmt.Sprintf("%-9s %s", name, counts)
	if total > 0 {
		filled := min(width, done*width/total)
		line = fmt.Sprintf("%-9s [%s%s] %d/%d ops, %s", name, strings.Repeat("#", filled),
			strings.Repeat(".", width-filled), done, total, counts)
	}
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r\033[K%s%s", line, end)
}
