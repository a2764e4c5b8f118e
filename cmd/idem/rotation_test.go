package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/storage"
	"github.com/idemhq/idem/seal"
)

// TestRotationUnderLoad walks the master key rotation of docs/operations.md
// ("Encryption at rest", "Rotation, without downtime") under a steady load
// of first arrivals and replays from several clients over several tenants.
// On PostgreSQL two idem serve processes share the database, each
// restarted in turn with the next key file while the other serves:
//
//  1. the new key added second everywhere (both processes hold both keys
//     before either wraps with the new one);
//  2. the new key moved first everywhere, one process at a time: the one
//     restarted first wraps new tenants' data keys under the new key while
//     the other, still wrapping with the old one, opens them;
//  3. the real idem keys rotate binary re-wraps the data keys during the
//     load, and --check then exits 0;
//  4. the old key dropped from both files.
//
// On SQLite one process serves; requests wait while it restarts, and idem
// keys rotate writes beside it.
//
// No request gets a 5xx or a wrong answer (a client whose connection breaks
// retries against the other process, as a load balancer does). Afterwards
// every stored answer replays as it was first answered, every sealed
// idem_keys row is one of them, and the relays publish every sealed outbox
// row, which they open to do so; no data key needs the old master key.
func TestRotationUnderLoad(t *testing.T) {
	t.Parallel()
	// One dialect at a time: each runs its own processes and load on the
	// machine's cores.
	t.Run("postgres", func(t *testing.T) { rotationUnderLoad(t, "postgres", 2) })
	t.Run("sqlite", func(t *testing.T) { rotationUnderLoad(t, "sqlite", 1) })
}

// rotationUnderLoad is TestRotationUnderLoad on the dialect with procs
// serve processes sharing the database.
func rotationUnderLoad(t *testing.T, dialect string, procs int) {
	ctx := context.Background()
	db := dbURL(t, dialect)
	oldKey, newKey := masterKey(t, "k-old"), masterKey(t, "k-new")
	var (
		oldOnly    = writeKeyFile(t, oldKey)
		newSecond  = writeKeyFile(t, oldKey, newKey) // step 1
		newFirst   = writeKeyFile(t, newKey, oldKey) // steps 2 and 3
		newOnly    = writeKeyFile(t, newKey)         // step 4
		tenants    []tenantClient
		apiKeys    []string
		tenantName = func(i int) string { return fmt.Sprintf("rot%d", i) }
	)
	const tenantCount = 8
	for i := range tenantCount {
		secret := fmt.Sprintf("rotation-tenant-secret-%04d", i)
		apiKeys = append(apiKeys, tenantName(i)+":"+secret)
		tenants = append(tenants, tenantClient{key: secret})
	}
	env := []string{"IDEM_API_KEYS=" + strings.Join(apiKeys, ",")}
	serveWith := func(keyFile string) *proc {
		t.Helper()
		return start(t, env, "serve", "--addr", "127.0.0.1:0", "--db", db, "--encryption-key-file", keyFile,
			"--relay-lease", "3s")
	}
	f := &fleet{t: t}
	for range procs {
		f.add(serveWith(oldOnly)) // the first migrates the database
	}
	d, err := storage.OpenExisting(ctx, db, true) // read-only: it reads rows the processes wrote
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	l := &rotationLoad{f: f, tenants: tenants, answers: map[string]answer{}}
	l.active.Store(2)
	stop := l.start(4)
	defer stop() // also when the test fails early
	l.progress(t, 40)
	// roll restarts the processes from slot from on, in turn, with the key
	// file.
	roll := func(from int, keyFile string) {
		t.Helper()
		for i := from; i < procs; i++ {
			f.roll(i, func() *proc { return serveWith(keyFile) })
			l.progress(t, 30)
		}
	}

	// Step 1: the new key second, process by process.
	l.active.Store(4)
	roll(0, newSecond)

	// Step 2: the new key first, process by process. Between the first
	// two restarts, a tenant's first data key made by the process that
	// wraps with the new key is opened by the one that does not yet: that
	// is why step 1 comes first.
	f.roll(0, func() *proc { return serveWith(newFirst) })
	l.progress(t, 30)
	a, b := f.at(0), f.at(procs-1) // on SQLite, a and b are the one process
	fresh, body := tenants[4], `{"id":"fresh","currency":"EUR"}`
	first := l.send(t, a.URL, fresh, "rot-fresh", body)
	again := l.send(t, b.URL, fresh, "rot-fresh", body)
	if first.Status != http.StatusCreated || again.Status != http.StatusCreated || !bytes.Equal(first.Body, again.Body) ||
		again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a new tenant's answer stored by the process wrapping with the new key, replayed by the other: %d %s, then %d %v %s",
			first.Status, first.Body, again.Status, again.Header, again.Body)
	}
	l.remember("rot-fresh", fresh, body, first)
	body = `{"id":"fresh-2","currency":"EUR"}`
	if r := l.send(t, b.URL, fresh, "rot-fresh-2", body); r.Status != http.StatusCreated {
		t.Fatalf("the process wrapping with the old key sealing under a data key wrapped with the new one: %d %s", r.Status, r.Body)
	} else {
		l.remember("rot-fresh-2", fresh, body, r)
	}
	if got := masterKeyOf(t, d, tenantName(4)); got != "k-new" {
		t.Fatalf("tenant %s's data key is wrapped under %q, want k-new (made by the process with the new key first)", tenantName(4), got)
	}
	l.active.Store(6)
	roll(1, newFirst)

	// Step 3: rotate during the load. No process wraps with the old key
	// any more, so what needs re-wrapping is fixed now.
	l.active.Store(tenantCount)
	l.progress(t, 20)
	pending := int64(0)
	uses, err := seal.MasterKeysInUse(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range uses {
		if u.ID == "k-old" {
			pending = u.DataKeys
		}
	}
	if pending < 4 {
		t.Fatalf("%d data keys under k-old before the rotation (%+v); the load made at least 4 tenants' under it", pending, uses)
	}
	out, stderr, code := runIdem(t, nil, "keys", "rotate", "--db", db, "--encryption-key-file", newFirst, "--batch", "2")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("re-wrapped %d of %d data keys", pending, pending)) ||
		!strings.Contains(out, fmt.Sprintf(`done: %d data keys re-wrapped under "k-new"`, pending)) {
		t.Fatalf("keys rotate under load (%d): %s%s", code, out, stderr)
	}
	l.progress(t, 30)
	out, stderr, code = runIdem(t, nil, "keys", "rotate", "--check", "--db", db, "--encryption-key-file", newFirst)
	if code != 0 || !strings.Contains(out, `ok: every data key (`+fmt.Sprint(tenantCount)+`) is wrapped under the newest master key "k-new"`) {
		t.Fatalf("keys rotate --check (%d): %s%s", code, out, stderr)
	}

	// Step 4: the old key removed, process by process.
	roll(0, newOnly)
	stop()

	s := l.summary()
	t.Logf("%s: %d requests (%d first arrivals, %d replays), %d retried against the other process after a broken connection, %d 5xx, %d wrong",
		dialect, s.requests, s.firsts, s.replays, s.retried, s.serverErrors, len(s.wrong))
	if s.serverErrors > 0 || len(s.wrong) > 0 {
		t.Fatalf("%d 5xx, %d wrong answers during the rotation; first: %s", s.serverErrors, len(s.wrong), s.wrong[0])
	}

	// Every stored answer replays, from both processes, as it was first
	// answered; they are the only answers stored, all sealed.
	for i, key := range l.keys() {
		want := l.answers[key]
		r := l.send(t, f.at(i%procs).URL, want.tenant, key, want.body)
		if r.Status != http.StatusCreated || !bytes.Equal(r.Body, want.resp.Body) || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s after the rotation: %d %v %s; first answered %s", key, r.Status, r.Header, r.Body, want.resp.Body)
		}
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := d.Reader().QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	if sealed, plain := count(`SELECT count(*) FROM idem_keys WHERE sealed`), count(`SELECT count(*) FROM idem_keys WHERE NOT sealed`); sealed != len(l.answers) || plain != 0 {
		t.Fatalf("idem_keys: %d sealed, %d plaintext rows; want the %d answers replayed, all sealed", sealed, plain, len(l.answers))
	}
	// The relays open each sealed message to publish it: every one is
	// sent, none failed.
	deadline := time.Now().Add(2 * time.Minute)
	for count(`SELECT count(*) FROM idem_outbox WHERE sent_at IS NULL`) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("outbox rows unsent after 2 minutes: %d of %d; %d dead, last errors: %d",
				count(`SELECT count(*) FROM idem_outbox WHERE sent_at IS NULL`), count(`SELECT count(*) FROM idem_outbox`),
				count(`SELECT count(*) FROM idem_outbox WHERE dead_at IS NOT NULL`),
				count(`SELECT count(*) FROM idem_outbox WHERE last_error IS NOT NULL`))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n, plain, failed := count(`SELECT count(*) FROM idem_outbox WHERE sealed`), count(`SELECT count(*) FROM idem_outbox WHERE NOT sealed`),
		count(`SELECT count(*) FROM idem_outbox WHERE last_error IS NOT NULL OR dead_at IS NOT NULL`); n != len(l.answers) || plain != 0 || failed != 0 {
		t.Fatalf("idem_outbox: %d sealed (want one event per answer, %d), %d plaintext, %d failed to publish", n, len(l.answers), plain, failed)
	}
	if uses, err := seal.MasterKeysInUse(ctx, d); err != nil || len(uses) != 1 || uses[0].ID != "k-new" || uses[0].DataKeys != tenantCount {
		t.Fatalf("data keys by master key after the rotation: %+v %v; want all %d under k-new", uses, err, tenantCount)
	}
}

// masterKeyOf is the master key that wraps the tenant's only data key.
func masterKeyOf(t *testing.T, d seal.Store, tenant string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := d.DataKeys(ctx, tx, &driver.DataKeysParams{Tenant: tenant})
	if err != nil || len(rows) != 1 {
		t.Fatalf("tenant %s's data keys: %+v %v", tenant, rows, err)
	}
	return rows[0].MasterKeyID
}

// fleet is the idem serve processes behind a load balancer: requests go
// to the processes in rotation, and a process is taken out of rotation
// and drained before it is stopped.
type fleet struct {
	t        *testing.T
	mu       sync.Mutex
	cond     *sync.Cond
	slots    []*proc      // the processes, by slot
	out      map[int]bool // slots out of rotation
	inflight map[*proc]int
	next     int
}

func (f *fleet) add(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cond == nil {
		f.cond = sync.NewCond(&f.mu)
		f.out, f.inflight = map[int]bool{}, map[*proc]int{}
	}
	f.slots = append(f.slots, p)
}

// at is the process in slot i.
func (f *fleet) at(i int) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slots[i]
}

// pick chooses the next process in rotation, other than avoid, and counts
// a request in flight on it; done ends it.
func (f *fleet) pick(avoid *proc) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		for range len(f.slots) {
			i := f.next % len(f.slots)
			f.next++
			if p := f.slots[i]; !f.out[i] && (p != avoid || f.inRotation() == 1) {
				f.inflight[p]++
				return p
			}
		}
		f.cond.Wait() // every process is out of rotation: wait for one
	}
}

func (f *fleet) inRotation() int {
	return len(f.slots) - len(f.out)
}

func (f *fleet) done(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight[p]--
	f.cond.Broadcast()
}

// roll restarts slot i's process: out of rotation, drained, stopped
// (SIGTERM, a graceful stop), replaced by what next starts and back in
// rotation. The other processes serve meanwhile.
func (f *fleet) roll(i int, next func() *proc) {
	f.t.Helper()
	f.mu.Lock()
	f.out[i] = true
	old := f.slots[i]
	for f.inflight[old] > 0 {
		f.cond.Wait()
	}
	f.mu.Unlock()
	old.signal(syscall.SIGTERM)
	if err := old.wait(time.Minute); err != nil {
		f.t.Fatalf("serve in slot %d stopped with %v:\n%s", i, err, old.Stderr())
	}
	p := next()
	f.mu.Lock()
	f.slots[i] = p
	delete(f.out, i)
	f.cond.Broadcast()
	f.mu.Unlock()
}

// answer is what a key was first answered, and the request to replay it.
type answer struct {
	tenant tenantClient
	body   string
	resp   response
}

// rotationLoad is the steady load: workers creating accounts (a stored
// answer and an outbox event each) under fresh keys over the active
// tenants, each followed by a replay of one of the worker's earlier keys.
type rotationLoad struct {
	f       *fleet
	tenants []tenantClient
	active  atomic.Int64 // the tenants the load uses: the first active

	mu           sync.Mutex
	answers      map[string]answer
	requests     int
	firsts       int
	replays      int
	retried      int
	serverErrors int
	wrong        []string
}

type loadSummary struct {
	requests, firsts, replays, retried, serverErrors int
	wrong                                            []string
}

func (l *rotationLoad) summary() loadSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	return loadSummary{l.requests, l.firsts, l.replays, l.retried, l.serverErrors, append([]string(nil), l.wrong...)}
}

func (l *rotationLoad) keys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.answers))
	for k := range l.answers {
		out = append(out, k)
	}
	return out
}

// start runs workers until the returned stop is called; stop waits for
// them and may be called more than once.
func (l *rotationLoad) start(workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.work(ctx, w)
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// progress waits until n more requests were answered.
func (l *rotationLoad) progress(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	want := l.requests + n
	deadline := time.Now().Add(2 * time.Minute)
	for l.requests < want {
		if time.Now().After(deadline) {
			t.Fatalf("the load answered %d of %d requests within 2 minutes", l.requests, want)
		}
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		l.mu.Lock()
	}
}

func (l *rotationLoad) work(ctx context.Context, w int) {
	var mine []string
	for i := 0; ctx.Err() == nil; i++ {
		tenant := l.tenants[(w+i)%int(l.active.Load())]
		key := fmt.Sprintf("rot-%d-%d", w, i)
		body := fmt.Sprintf(`{"id":"acct-%d-%d","currency":"EUR"}`, w, i)
		r, err := l.balanced(tenant, key, body)
		if err != nil {
			l.fail("%s: %v", key, err)
			return
		}
		if !l.check(key, r, http.StatusCreated, nil) {
			continue
		}
		l.remember(key, tenant, body, r)
		mine = append(mine, key)

		old := mine[rand.IntN(len(mine))]
		l.mu.Lock()
		want := l.answers[old]
		l.mu.Unlock()
		r, err = l.balanced(want.tenant, old, want.body)
		if err != nil {
			l.fail("%s replayed: %v", old, err)
			return
		}
		l.check(old+" replayed", r, http.StatusCreated, want.resp.Body)
	}
}

// check counts an answer and reports whether it is right: the status, and
// for a replay the first answer's body.
func (l *rotationLoad) check(what string, r response, status int, first []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests++
	if first == nil {
		l.firsts++
	} else {
		l.replays++
	}
	switch {
	case r.Status >= 500:
		l.serverErrors++
		l.wrong = append(l.wrong, fmt.Sprintf("%s: %d %s", what, r.Status, r.Body))
		return false
	case r.Status != status:
		l.wrong = append(l.wrong, fmt.Sprintf("%s: %d %s", what, r.Status, r.Body))
		return false
	case first != nil && (!bytes.Equal(r.Body, first) || r.Header.Get("Idempotent-Replayed") != "true"):
		l.wrong = append(l.wrong, fmt.Sprintf("%s: %v %s, first answered %s", what, r.Header, r.Body, first))
		return false
	}
	return true
}

func (l *rotationLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wrong = append(l.wrong, fmt.Sprintf(format, args...))
}

func (l *rotationLoad) remember(key string, tenant tenantClient, body string, r response) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers[key] = answer{tenant: tenant, body: body, resp: r}
}

// balanced sends a request through the fleet. A broken connection (a
// process stopping) is retried, with the same Idempotency-Key, against
// another process, up to 10 times.
func (l *rotationLoad) balanced(tenant tenantClient, key, body string) (response, error) {
	var last *proc
	var err error
	for range 10 {
		p := l.f.pick(last)
		var r response
		r, err = post(p.URL, tenant, key, body)
		l.f.done(p)
		if err == nil {
			return r, nil
		}
		last = p
		l.mu.Lock()
		l.retried++
		l.mu.Unlock()
	}
	return response{}, err
}

// send is one request to the process at url, outside the load.
func (l *rotationLoad) send(t *testing.T, url string, tenant tenantClient, key, body string) response {
	t.Helper()
	r, err := post(url, tenant, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// post creates an account as the tenant under the Idempotency-Key.
func post(url string, tenant tenantClient, key, body string) (response, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/accounts", strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tenant.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := loadClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}
