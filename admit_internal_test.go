package idem

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// sim drives an admission as the Batcher does, with requests numbered
// from 1 and its own view of the batches, and checks the admission's
// invariants after every step.
type sim struct {
	t       *testing.T
	s       admission[int]
	cfg     BatchConfig
	next    int
	scopeOf map[int]string    // every request's scope
	waits   map[int]bool      // requests waiting to be handed a batch
	gone    map[int]bool      // requests that left or were refused
	batches map[int]*simBatch // batches taken, by their first request
	open    map[string]int    // each scope's batch that may be joined, by its first request
}

type simBatch struct {
	scope string
	ids   []int
}

func newSim(t *testing.T, cfg BatchConfig) *sim {
	return &sim{t: t, s: newAdmission[int](cfg.MaxBatch, cfg.MaxQueued, cfg.Concurrency), cfg: cfg, scopeOf: map[int]string{}, waits: map[int]bool{},
		gone: map[int]bool{}, batches: map[int]*simBatch{}, open: map[string]int{}}
}

// arrive sends a request of scope as the Batcher's submit does and says
// what became of it: "joins", "starts", "waits" or "busy".
func (m *sim) arrive(scope string) (int, string) {
	m.next++
	id := m.next
	m.scopeOf[id] = scope
	running, carried, open := m.runningOf(scope), m.carriedBy(scope), m.batches[m.open[scope]]
	oldest := m.waitingOf(scope)
	mayStart := running < m.cfg.Concurrency && (len(oldest)+1)*running >= carried
	got, batch := m.s.arrive(scope, id)
	switch got {
	case joins:
		if open == nil || len(open.ids) >= m.cfg.MaxBatch {
			m.t.Fatalf("request %d joined no open batch with room (%v)", id, open)
		}
		m.s.join(scope)
		open.ids = append(open.ids, id)
	case starts:
		if open != nil && len(open.ids) < m.cfg.MaxBatch || !mayStart {
			m.t.Fatalf("request %d started a batch beside %d of its scope's carrying %d, %d waiting, open %v",
				id, running, carried, len(oldest), open)
		}
		if want := append(oldest[:min(len(oldest), m.cfg.MaxBatch-1)], id); !slices.Equal(batch, want) {
			m.t.Fatalf("request %d started %v, want %v: the oldest waiting and it", id, batch, want)
		}
		for _, w := range batch {
			delete(m.waits, w)
		}
		m.batches[batch[0]] = &simBatch{scope, batch}
		m.open[scope] = batch[0]
	case waits:
		if open != nil && len(open.ids) < m.cfg.MaxBatch || mayStart {
			m.t.Fatalf("request %d waits beside %d of its scope's batches carrying %d, open %v", id, running, carried, open)
		}
		m.waits[id] = true
	case busy:
		if mayStart || len(m.waits) < m.cfg.MaxQueued {
			m.t.Fatalf("request %d refused with %d of its scope's batches and %d waiting", id, running, len(m.waits))
		}
		m.gone[id] = true
	}
	m.check("arrive")
	return id, [...]string{joins: "joins", starts: "starts", waits: "waits", busy: "busy"}[got]
}

// arrivals sends n requests of scope and says what became of each.
func (m *sim) arrivals(scope string, n int) string {
	got := make([]string, n)
	for i := range got {
		_, got[i] = m.arrive(scope)
	}
	return strings.Join(got, " ")
}

// begin closes the batch led by id to arrivals, as its transaction begins.
func (m *sim) begin(id int) {
	b := m.batches[id]
	if m.open[b.scope] == id {
		delete(m.open, b.scope)
		m.s.closeOpen(b.scope)
	}
}

// end ends the batch led by id, and returns the batches its scope starts.
func (m *sim) end(id int) [][]int {
	m.begin(id)
	b := m.batches[id]
	delete(m.batches, id)
	starts := m.s.end(b.scope, len(b.ids))
	for _, next := range starts {
		oldest, running, carried := m.waitingOf(b.scope), m.runningOf(b.scope), m.carriedBy(b.scope)
		if running >= m.cfg.Concurrency || len(oldest)*running < carried {
			m.t.Fatalf("scope %s started %v beside %d batches carrying %d", b.scope, next, running, carried)
		}
		if want := oldest[:min(len(oldest), m.cfg.MaxBatch)]; !slices.Equal(next, want) {
			m.t.Fatalf("scope %s handed %v, want its oldest %v", b.scope, next, want)
		}
		for _, w := range next {
			delete(m.waits, w)
		}
		m.batches[next[0]] = &simBatch{b.scope, next}
		m.open[b.scope] = next[0]
	}
	m.check("end")
	return starts
}

// leave withdraws id as its caller gives up; it reports whether it left.
func (m *sim) leave(id int) bool {
	left := m.s.leave(m.scopeOf[id], id)
	if left != m.waits[id] {
		m.t.Fatalf("request %d: left %v, waiting %v", id, left, m.waits[id])
	}
	if left {
		delete(m.waits, id)
		m.gone[id] = true
	}
	m.check("leave")
	return left
}

// waitingOf returns scope's waiting requests, oldest first.
func (m *sim) waitingOf(scope string) []int {
	var ids []int
	for id := range m.waits {
		if m.scopeOf[id] == scope {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (m *sim) carriedBy(scope string) int {
	n := 0
	for _, b := range m.batches {
		if b.scope == scope {
			n += len(b.ids)
		}
	}
	return n
}

func (m *sim) runningOf(scope string) int {
	n := 0
	for _, b := range m.batches {
		if b.scope == scope {
			n++
		}
	}
	return n
}

// check holds the admission's state to the sim's view and the invariants:
// no batch above MaxBatch nor a gone request in one, at most Concurrency
// batches of a scope, at most MaxQueued waiting, and a scope's requests
// wait only beside a batch of theirs, with no open one with room, while
// it runs Concurrency batches or they are fewer than its batches carry
// on average.
func (m *sim) check(step string) {
	t := m.t
	t.Helper()
	if m.s.running != len(m.batches) || m.s.waiting != len(m.waits) {
		t.Fatalf("%s: admission counts %d batches and %d waiting, the sim %d and %d",
			step, m.s.running, m.s.waiting, len(m.batches), len(m.waits))
	}
	if len(m.waits) > m.cfg.MaxQueued {
		t.Fatalf("%s: %d waiting, MaxQueued %d", step, len(m.waits), m.cfg.MaxQueued)
	}
	for _, b := range m.batches {
		if len(b.ids) > m.cfg.MaxBatch {
			t.Fatalf("%s: a batch of %d, MaxBatch %d", step, len(b.ids), m.cfg.MaxBatch)
		}
		for _, id := range b.ids {
			if m.gone[id] {
				t.Fatalf("%s: request %d, gone, is in a batch", step, id)
			}
		}
	}
	for name, sc := range m.s.scopes {
		running := m.runningOf(name)
		carried := m.carriedBy(name)
		if sc.running != running || running > m.cfg.Concurrency || running == 0 || sc.carried != carried {
			t.Fatalf("%s: scope %s has %d batches carrying %d (the sim %d carrying %d), Concurrency %d",
				step, name, sc.running, sc.carried, running, carried, m.cfg.Concurrency)
		}
		open := m.batches[m.open[name]]
		if got := len(sc.queue); got > 0 && (running < m.cfg.Concurrency && got*running >= carried ||
			open != nil && len(open.ids) < m.cfg.MaxBatch) {
			t.Fatalf("%s: %d of scope %s wait beside %d of its batches carrying %d, open %v", step, got, name, running, carried, open)
		}
		carries := 0
		if open != nil {
			carries = len(open.ids)
		}
		if sc.open != carries {
			t.Fatalf("%s: scope %s's open batch carries %d, the sim's %v", step, name, sc.open, open)
		}
	}
	scopes := map[string]bool{}
	for _, b := range m.batches {
		scopes[b.scope] = true
	}
	if len(scopes) != len(m.s.scopes) {
		t.Fatalf("%s: the admission keeps %d scopes, %d have batches", step, len(m.s.scopes), len(scopes))
	}
}

func TestAdmissionRules(t *testing.T) {
	t.Parallel()
	cfg := func(concurrency, maxBatch, maxQueued int) BatchConfig {
		return BatchConfig{Concurrency: concurrency, MaxBatch: maxBatch, MaxQueued: maxQueued}
	}
	for _, tc := range []struct {
		name string
		cfg  BatchConfig
		run  func(m *sim) string
		want string
	}{{
		name: "a lone request runs at once",
		cfg:  cfg(1, 128, 1),
		run:  func(m *sim) string { _, got := m.arrive("a"); return got },
		want: "starts",
	}, {
		name: "beside a lone request a second starts at once",
		cfg:  cfg(2, 128, 10),
		run: func(m *sim) string {
			a, x := m.arrive("a")
			m.begin(a)
			_, y := m.arrive("a")
			return x + " " + y
		},
		want: "starts starts",
	}, {
		name: "arrivals join their scope's batch until it begins",
		cfg:  cfg(2, 128, 10),
		run: func(m *sim) string {
			_, x := m.arrive("a")
			_, y := m.arrive("a")
			return x + " " + y
		},
		want: "starts joins",
	}, {
		name: "beside a batch of three the third waiting starts one with the two before it",
		cfg:  cfg(2, 128, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.arrive("a")
			m.arrive("a")
			m.begin(a)
			return m.arrivals("a", 3) + fmt.Sprint(" ", m.batches[4].ids)
		},
		want: "waits waits starts [4 5 6]",
	}, {
		name: "a full batch takes nobody more: the next with company starts one",
		cfg:  cfg(2, 2, 10),
		run: func(m *sim) string {
			return m.arrivals("a", 4)
		},
		want: "starts joins waits starts",
	}, {
		name: "past Concurrency batches a scope's arrivals wait, and the oldest are handed the next",
		cfg:  cfg(1, 2, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.begin(a)
			return m.arrivals("a", 3) + fmt.Sprint(" ", m.end(a))
		},
		want: "waits waits waits [[2 3]]",
	}, {
		name: "a batch ending hands on only with company, or when its scope runs nothing",
		cfg:  cfg(2, 128, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.begin(a)
			b, _ := m.arrive("a") // beside a lone one: starts
			m.arrive("a")
			m.arrive("a")
			m.begin(b)
			m.arrive("a") // beside batches of 1 and 3: waits
			return fmt.Sprint(m.end(a), m.end(b))
		},
		want: "[] [[5]]",
	}, {
		name: "another scope starts beside a scope at its Concurrency",
		cfg:  cfg(1, 128, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.begin(a)
			_, x := m.arrive("a")
			_, y := m.arrive("b")
			return x + " " + y
		},
		want: "waits starts",
	}, {
		name: "MaxQueued waiting: the next is busy",
		cfg:  cfg(1, 128, 2),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.begin(a)
			return m.arrivals("a", 3)
		},
		want: "waits waits busy",
	}, {
		name: "a caller that gave up is never run",
		cfg:  cfg(1, 128, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.begin(a)
			w, _ := m.arrive("a")
			x, _ := m.arrive("a")
			return fmt.Sprint(m.leave(w), m.end(a), m.leave(x))
		},
		want: "true [[3]] false",
	}, {
		name: "a scope's last batch ending forgets it",
		cfg:  cfg(1, 128, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.end(a)
			return fmt.Sprint(len(m.s.scopes))
		},
		want: "0",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.run(newSim(t, tc.cfg)); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Random sequences of arrivals, joins, batches beginning and ending, and
// callers giving up, over a few scopes and small bounds: every step keeps
// the invariants (sim.check), and once arrivals stop, batches ending take
// every waiting request (none starves).
func TestAdmissionInvariants(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 46))
		cfg := BatchConfig{Concurrency: 1 + r.IntN(4), MaxBatch: 1 + r.IntN(5), MaxQueued: 1 + r.IntN(20)}
		m := newSim(t, cfg)
		scopes := []string{"a", "b", "c", "d", "e"}[:1+r.IntN(5)]
		for range 400 {
			switch op := r.IntN(10); {
			case op < 5:
				m.arrive(scopes[r.IntN(len(scopes))])
			case op < 7 && len(m.batches) > 0:
				m.end(pick(r, slices.Collect(maps.Keys(m.batches))))
			case op < 9 && len(m.batches) > 0:
				m.begin(pick(r, slices.Collect(maps.Keys(m.batches))))
			case m.next > 0:
				m.leave(1 + r.IntN(m.next))
			}
		}
		for ends := 0; len(m.waits) > 0; ends++ {
			if ends > m.next || len(m.batches) == 0 {
				t.Fatalf("seed %d: %d requests still wait after %d batches ended, %d running", seed, len(m.waits), ends, len(m.batches))
			}
			m.end(slices.Min(slices.Collect(maps.Keys(m.batches))))
		}
	}
}

func pick(r *rand.Rand, ids []int) int {
	slices.Sort(ids)
	return ids[r.IntN(len(ids))]
}
