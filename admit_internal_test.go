package idem

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// sim drives an admission as the Batcher does, with requests numbered
// from 1, a clock of its own, and the batches it was told to start, and
// checks the admission's invariants after every step.
type sim struct {
	t       *testing.T
	s       admission[int]
	cfg     BatchConfig
	now     time.Time
	next    int
	scopeOf map[int]string    // every request's scope
	waits   map[int]bool      // requests waiting to be taken
	due     map[int]time.Time // when each one's MaxWait passes
	gone    map[int]bool      // requests that left or were refused
	batches map[int]*simBatch // running batches, by their first request
	open    map[string]int    // each scope's batch that may be joined, by its first request
	skipped map[string]int    // starts of other scopes while this one, running nothing, waited
}

type simBatch struct {
	scope string
	ids   []int
}

func newSim(t *testing.T, cfg BatchConfig) *sim {
	return &sim{t: t, s: newAdmission[int](cfg), cfg: cfg, now: time.Unix(0, 0),
		scopeOf: map[int]string{}, waits: map[int]bool{}, due: map[int]time.Time{}, gone: map[int]bool{},
		batches: map[int]*simBatch{}, open: map[string]int{}, skipped: map[string]int{}}
}

// arrive sends a request of scope as the Batcher's submit does and says
// what became of it: "joined", "runs" (in a batch started now), "waits"
// or "busy".
func (m *sim) arrive(scope string) (int, string) {
	m.next++
	id := m.next
	m.scopeOf[id] = scope
	if m.s.joinable(scope) {
		m.s.join(scope)
		b := m.batches[m.open[scope]]
		b.ids = append(b.ids, id)
		m.check(nil, "arrive")
		return id, "joined"
	}
	m.waits[id] = true
	m.due[id] = m.now.Add(m.cfg.MaxWait)
	starts, waits, busy := m.s.arrive(scope, id, m.now)
	if busy {
		delete(m.waits, id)
		m.gone[id] = true
	}
	m.check(starts, "arrive")
	switch {
	case busy:
		if waits || m.runningOf(scope) == 0 && len(m.batches) < 2*m.cfg.Concurrency {
			m.t.Fatalf("request %d refused, waits %v, with a place free for it", id, waits)
		}
		return id, "busy"
	case waits != m.waits[id]:
		m.t.Fatalf("request %d: waits %v, taken %v", id, waits, !m.waits[id])
	case waits:
		return id, "waits"
	}
	return id, "runs"
}

// begin closes the batch led by id to arrivals, as its transaction begins.
func (m *sim) begin(id int) {
	b := m.batches[id]
	if m.open[b.scope] == id {
		delete(m.open, b.scope)
		m.s.closeOpen(b.scope)
	}
}

// end ends the batch led by id.
func (m *sim) end(id int) {
	m.begin(id)
	b := m.batches[id]
	delete(m.batches, id)
	m.check(m.s.end(b.scope, len(b.ids), m.now), "end")
}

// leave withdraws id as its caller gives up; it reports whether it left.
func (m *sim) leave(id int) bool {
	starts, left := m.s.leave(m.scopeOf[id], id, m.now)
	m.left(id, left)
	m.check(starts, "leave")
	return left
}

// tick is id's timer firing, d after the last step; it reports whether
// id got ErrBusy.
func (m *sim) tick(id int, d time.Duration) bool {
	m.now = m.now.Add(d)
	scope := m.scopeOf[id]
	runs, waits, due := m.runningOf(scope) > 0, m.waits[id], !m.now.Before(m.due[id])
	starts, stillWaits, busy := m.s.tick(scope, id, m.now)
	if busy {
		m.left(id, waits)
	}
	m.check(starts, "tick")
	switch {
	case busy && (runs || !due):
		m.t.Fatalf("request %d got ErrBusy at %v, due %v, its scope %s running %v", id, m.now, m.due[id], scope, runs)
	case waits && due && !runs && !busy:
		m.t.Fatalf("request %d kept waiting past MaxWait with nothing of its scope under way", id)
	case waits && due && runs:
		m.due[id] = m.now.Add(m.cfg.MaxWait) // it waits for the database: MaxWait starts again
	}
	if stillWaits != m.waits[id] {
		m.t.Fatalf("request %d: waits %v, want %v", id, stillWaits, m.waits[id])
	}
	return busy
}

func (m *sim) left(id int, left bool) bool {
	if left != m.waits[id] {
		m.t.Fatalf("request %d: left %v, waiting %v", id, left, m.waits[id])
	}
	if left {
		delete(m.waits, id)
		m.gone[id] = true
	}
	return left
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

// check applies the batches started to the sim's own view, one by one,
// checking each against the rules it must keep at its moment, then checks
// the admission's state against that view.
func (m *sim) check(starts [][]int, step string) {
	t := m.t
	t.Helper()
	share := m.s.share
	waitingOf := func(scope string) int {
		n := 0
		for id := range m.waits {
			if m.scopeOf[id] == scope {
				n++
			}
		}
		return n
	}
	for _, batch := range starts {
		st := struct {
			scope string
			batch []int
		}{m.scopeOf[batch[0]], batch}
		if n := len(st.batch); n == 0 || n > m.cfg.MaxBatch {
			t.Fatalf("%s: a batch of %d, MaxBatch %d", step, n, m.cfg.MaxBatch)
		}
		running := len(m.batches)
		mine := m.runningOf(st.scope)
		if limit := m.cfg.Concurrency * map[bool]int{true: 2, false: 1}[mine == 0]; running >= limit {
			t.Fatalf("%s: scope %s (%d running) started a batch with %d running", step, st.scope, mine, running)
		}
		// A scope with nothing running that waits may take any place
		// under 2×Concurrency, so it was passed over.
		for scope := range m.skipped {
			if scope != st.scope {
				m.skipped[scope]++
			}
		}
		for id := range m.waits {
			if o := m.scopeOf[id]; o != st.scope && mine >= share && m.runningOf(o) < share {
				t.Fatalf("%s: scope %s holding %d (share %d) started a batch while %s, running %d, waits",
					step, st.scope, mine, share, o, m.runningOf(o))
			}
		}
		for i, id := range st.batch {
			if !m.waits[id] || m.scopeOf[id] != st.scope {
				t.Fatalf("%s: batch %v of %s takes request %d (gone %v, scope %s)", step, st.batch, st.scope, id, m.gone[id], m.scopeOf[id])
			}
			if i > 0 && id < st.batch[i-1] {
				t.Fatalf("%s: batch %v not oldest first", step, st.batch)
			}
			delete(m.waits, id)
		}
		m.batches[st.batch[0]] = &simBatch{scope: st.scope, ids: slices.Clone(st.batch)}
		m.open[st.scope] = st.batch[0]
		delete(m.skipped, st.scope)
	}
	for scope := range m.skipped {
		if waitingOf(scope) == 0 || m.runningOf(scope) > 0 {
			delete(m.skipped, scope)
		}
	}
	for id := range m.waits {
		if scope := m.scopeOf[id]; m.runningOf(scope) == 0 {
			if _, ok := m.skipped[scope]; !ok {
				m.skipped[scope] = 0
			}
		}
	}
	// Each scope passing over a waiting one goes behind it in the turns.
	names := map[string]bool{}
	for _, scope := range m.scopeOf {
		names[scope] = true
	}
	for scope, n := range m.skipped {
		if n >= len(names) {
			t.Fatalf("%s: scope %s, nothing running, passed over %d times by %d other scopes", step, scope, n, len(names)-1)
		}
	}

	s := &m.s
	if s.waiting != len(m.waits) || s.running != len(m.batches) {
		t.Fatalf("%s: admission counts %d waiting, %d running; want %d, %d", step, s.waiting, s.running, len(m.waits), len(m.batches))
	}
	if s.waiting > m.cfg.MaxQueued || s.running > 2*m.cfg.Concurrency {
		t.Fatalf("%s: %d waiting (MaxQueued %d), %d running (Concurrency %d)", step, s.waiting, m.cfg.MaxQueued, s.running, m.cfg.Concurrency)
	}
	for _, b := range m.batches {
		if len(b.ids) > m.cfg.MaxBatch {
			t.Fatalf("%s: a batch of %d, MaxBatch %d", step, len(b.ids), m.cfg.MaxBatch)
		}
	}
	for name, sc := range s.scopes {
		if sc.running != m.runningOf(name) || len(sc.queue) != waitingOf(name) {
			t.Fatalf("%s: scope %s counts %d running, %d waiting; want %d, %d", step, name, sc.running, len(sc.queue), m.runningOf(name), waitingOf(name))
		}
		if sc.running == 0 && len(sc.queue) == 0 {
			t.Fatalf("%s: scope %s kept with nothing running or waiting", step, name)
		}
		if s.startable(sc, m.now, s.below()) {
			t.Fatalf("%s: scope %s can start a batch but was left waiting", step, name)
		}
		if (len(sc.queue) > 0) != slices.Contains(s.turns, sc) {
			t.Fatalf("%s: scope %s, %d waiting, in turns %v", step, name, len(sc.queue), slices.Contains(s.turns, sc))
		}
	}
}

// batchOf returns the ids of the batch led by id.
func (m *sim) batchOf(id int) []int { return m.batches[id].ids }

func TestAdmissionRules(t *testing.T) {
	t.Parallel()
	const maxWait = time.Second
	cfg := func(concurrency, maxBatch, maxQueued int) BatchConfig {
		return BatchConfig{Concurrency: concurrency, MaxBatch: maxBatch, MaxQueued: maxQueued, MaxWait: maxWait, Share: 0.5}
	}
	for _, tc := range []struct {
		name string
		cfg  BatchConfig
		run  func(m *sim) string
		want string
	}{{
		name: "a lone request runs at once",
		cfg:  cfg(1, 128, 1),
		run: func(m *sim) string {
			_, got := m.arrive("a")
			return got
		},
		want: "runs",
	}, {
		name: "beside a lone request a second runs at once",
		cfg:  cfg(2, 128, 10),
		run: func(m *sim) string {
			_, a := m.arrive("a")
			_, b := m.arrive("a")
			return a + " " + b
		},
		want: "runs runs",
	}, {
		name: "beside a batch of three the third waiting starts one",
		cfg:  cfg(2, 128, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.begin(a)
			b, _ := m.arrive("a") // beside a lone one: runs
			m.begin(b)
			var got []string
			for range 3 {
				_, v := m.arrive("a") // no place: waits
				got = append(got, v)
			}
			m.end(a) // its place goes to the three
			m.begin(3)
			m.end(b)
			for range 3 {
				_, v := m.arrive("a")
				got = append(got, v)
			}
			return strings.Join(got, " ")
		},
		want: "waits waits waits waits waits runs",
	}, {
		name: "a request joins its scope's batch until it begins, up to MaxBatch",
		cfg:  cfg(1, 3, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			_, b := m.arrive("a")
			_, c := m.arrive("a")
			_, d := m.arrive("a")
			m.begin(a)
			_, e := m.arrive("a")
			return fmt.Sprint(b, c, d, e, m.batchOf(a))
		},
		want: "joinedjoinedwaitswaits[1 2 3]",
	}, {
		name: "MaxQueued is a hard bound, and a lone request still runs",
		cfg:  cfg(1, 128, 2),
		run: func(m *sim) string {
			var got []string
			for _, scope := range []string{"a", "a", "a", "a", "b", "c"} {
				_, v := m.arrive(scope)
				if v == "joined" {
					m.begin(1)
					continue
				}
				got = append(got, v)
			}
			return strings.Join(got, " ")
		},
		// b runs beside a in a place of its own; c finds 2×Concurrency running.
		want: "runs waits waits runs busy",
	}, {
		name: "a restless request takes a free place at MaxWait/4",
		cfg:  cfg(2, 128, 10),
		run: func(m *sim) string {
			m.arrive("a")
			m.begin(1)
			m.arrive("a")
			m.begin(2)
			m.arrive("a")
			m.arrive("a")
			m.end(2) // its place goes to 3 and 4
			m.begin(3)
			m.end(1)
			_, v := m.arrive("a") // beside two, alone: waits
			m.tick(5, maxWait/4-time.Millisecond)
			before := fmt.Sprint(m.waits[5])
			m.tick(5, time.Millisecond)
			return fmt.Sprint(v, before, m.batchOf(5))
		},
		want: "waitstrue[5]",
	}, {
		name: "MaxWait gives ErrBusy only when the scope has nothing under way",
		cfg:  cfg(1, 1, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.begin(a)
			m.arrive("b") // beside, in a place of its own
			a2, _ := m.arrive("a")
			c, _ := m.arrive("c") // 2×Concurrency run
			return fmt.Sprint(m.tick(a2, maxWait-time.Millisecond), m.tick(c, 0), m.tick(a2, time.Millisecond), m.tick(c, time.Millisecond))
		},
		want: "false false false true",
	}, {
		name: "a caller that gave up is never run",
		cfg:  cfg(1, 128, 10),
		run: func(m *sim) string {
			a, _ := m.arrive("a")
			m.begin(a)
			b, _ := m.arrive("a")
			c, _ := m.arrive("a")
			left := m.leave(b)
			m.end(a)
			return fmt.Sprint(left, m.batchOf(c), m.leave(c))
		},
		want: "true [3] false",
	}, {
		name: "a scope holding its share leaves a free place to one below it",
		cfg:  cfg(2, 1, 10),
		run: func(m *sim) string {
			a1, _ := m.arrive("a")
			b1, _ := m.arrive("b")
			m.arrive("a")
			b2, _ := m.arrive("b")
			m.end(b1)
			got := fmt.Sprint(len(m.batches), m.batches[b2] != nil)
			m.end(b2)
			m.end(a1)
			return got + fmt.Sprint(m.batchOf(3))
		},
		want: "2 true[3]",
	}, {
		name: "scopes take turns",
		cfg:  cfg(1, 2, 10),
		run: func(m *sim) string {
			a0, _ := m.arrive("a")
			c0, _ := m.arrive("c") // beside, in a place of its own
			for _, scope := range []string{"a", "a", "a", "a", "a", "b", "d"} {
				m.arrive(scope) // the first joins a0's batch
			}
			m.end(a0)
			var got []string
			for range 4 {
				var led int
				for id, b := range m.batches {
					if id != c0 {
						led = id
						got = append(got, fmt.Sprint(b.scope, b.ids))
					}
				}
				m.end(led)
			}
			return strings.Join(got, " ")
		},
		want: "a[4 5] b[8] d[9] a[6 7]",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.run(newSim(t, tc.cfg)); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Random sequences of arrivals, joins, batches beginning and ending,
// callers giving up, and requests' ticks as time passes, over a few scopes
// and small bounds: every step keeps the invariants (sim.check), and once
// arrivals stop, batches ending take every waiting request (none starves).
func TestAdmissionInvariants(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 46))
		cfg := BatchConfig{Concurrency: 1 + r.IntN(4), MaxBatch: 1 + r.IntN(5), MaxQueued: 1 + r.IntN(20),
			MaxWait: time.Second, Share: []float64{0.25, 0.5, 1}[r.IntN(3)]}
		m := newSim(t, cfg)
		scopes := []string{"a", "b", "c", "d", "e"}[:1+r.IntN(5)]
		for range 400 {
			switch op := r.IntN(10); {
			case op < 4:
				m.arrive(scopes[r.IntN(len(scopes))])
			case op < 6 && len(m.batches) > 0:
				m.end(pick(r, slices.Collect(maps.Keys(m.batches))))
			case op < 7 && len(m.batches) > 0:
				m.begin(pick(r, slices.Collect(maps.Keys(m.batches))))
			case op < 8 && m.next > 0:
				m.leave(1 + r.IntN(m.next))
			case m.next > 0:
				m.tick(1+r.IntN(m.next), time.Duration(r.IntN(int(cfg.MaxWait/3))))
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
