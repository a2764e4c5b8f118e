package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// previousRelease is the commit whose binary TestRollingUpgrade runs beside
// this one: the newest commit whose migrations are all older than this
// binary's newest. Move it forward when a release adds a migration.
const previousRelease = "db28d8529a4220402d4d283e220e5332b0785cee"

// buildRelease builds the idem binary of commit rev from this repository's
// history (git archive, then go build), once per test run.
func buildRelease(t *testing.T, rev string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the upgrade test builds the previous release from git history: %v", err)
	}
	dir := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", strings.TrimSpace(string(root)), rev, dir))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s (a clone with full history is needed): %v\n%s", rev, err, out)
	}
	bin := filepath.Join(dir, "idem-previous")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "./cmd/idem")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the previous release %s: %v\n%s", rev, err, out)
	}
	return bin
}

// A rolling upgrade on one PostgreSQL with zero failed requests: the
// previous release serves under load while this binary migrates the schema
// (a compatible expand step), then both serve, and a restarted old process
// starts and is ready on the newer schema. Every request answered 201, each
// transfer is in the ledger once, and the ledger verifies.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	old := buildRelease(t, previousRelease)
	db := dbURL(t, "postgres")

	serveOld := func() *proc {
		return launchBinary(t, old, true, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--relay=false")
	}
	a := serveOld()
	account(t, a.URL, "up-a", "EUR")
	account(t, a.URL, "up-b", "EUR")

	// The load: transfers sent one at a time, round robin, to the servers
	// in rotation. A request holds mu while it runs, so a server taken out
	// of rotation has no request in flight when it is stopped: drained, as
	// a load balancer does.
	var (
		mu       sync.Mutex
		rotation = []string{a.URL}
		sent     atomic.Int64
		failures []string
		stop     = make(chan struct{})
		done     = make(chan struct{})
	)
	post := func(u string, i int) string {
		body := fmt.Sprintf(`{"debit_account_id":"up-a","credit_account_id":"up-b","amount":1,"currency":"EUR","id":"up-%d"}`, i)
		req, err := http.NewRequest("POST", u+"/v1/transfers", strings.NewReader(body))
		if err != nil {
			return err.Error()
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("up-%d", i))
		resp, err := client.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated {
			return fmt.Sprintf("%d %s", resp.StatusCode, b)
		}
		return ""
	}
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			u := rotation[i%len(rotation)]
			if fail := post(u, i); fail != "" {
				failures = append(failures, u+": "+fail)
			}
			sent.Add(1)
			mu.Unlock()
		}
	}()
	progress := func(n int64) {
		t.Helper()
		want := sent.Load() + n
		waitFor(t, func() bool { return sent.Load() >= want })
	}
	progress(20)

	// This binary migrates while the old one serves.
	out, err := exec.Command(binary(t), "migrate", "--db", db).CombinedOutput()
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	// The schema is now newer than the old binary knows: otherwise this
	// test would prove nothing (move previousRelease back, or the release
	// adds no migration).
	out, err = exec.Command(old, "migrate", "--db", db, "--dry-run").CombinedOutput()
	m := regexp.MustCompile(`at version (\d+) of (\d+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("old binary's dry run: %v\n%s", err, out)
	}
	applied, _ := strconv.Atoi(string(m[1]))
	known, _ := strconv.Atoi(string(m[2]))
	if applied <= known {
		t.Fatalf("the migrated schema is not newer than the previous release's: %s", out)
	}
	if r := call(t, "GET", a.URL+"/readyz", "", nil); r.Status != http.StatusOK {
		t.Fatalf("the old binary is not ready on the migrated schema: %d %s", r.Status, r.Body)
	}
	progress(20)

	// The new binary joins, with migrations off.
	b := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--migrate=false", "--relay=false")
	mu.Lock()
	rotation = append(rotation, b.URL)
	mu.Unlock()
	progress(20)

	// An old process restarts on the newer schema: drained, stopped,
	// started again, back in rotation.
	mu.Lock()
	rotation = []string{b.URL}
	mu.Unlock()
	a.signal(syscall.SIGTERM)
	if err := a.wait(30 * time.Second); err != nil {
		t.Fatalf("old serve exit: %v", err)
	}
	a2 := serveOld()
	if r := call(t, "GET", a2.URL+"/readyz", "", nil); r.Status != http.StatusOK {
		t.Fatalf("a restarted old binary is not ready: %d %s", r.Status, r.Body)
	}
	mu.Lock()
	rotation = []string{a2.URL, b.URL}
	mu.Unlock()
	progress(20)
	close(stop)
	<-done

	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed during the upgrade, first: %s", len(failures), sent.Load(), failures[0])
	}
	bal := call(t, "GET", b.URL+"/v1/accounts/up-b/balance", "", nil).json(t)
	if got := int64(bal["balance"].(float64)); got != sent.Load() {
		t.Fatalf("balance %d after %d transfers of 1", got, sent.Load())
	}
	verify := exec.Command(binary(t), "ledger", "verify", "--db", db)
	verify.Dir = t.TempDir()
	verify.Env = os.Environ()
	if out, err := verify.CombinedOutput(); err != nil {
		t.Fatalf("ledger verify: %v\n%s", err, out)
	}
}
