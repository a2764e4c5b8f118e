package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/idemclient"
	"github.com/idemhq/idem/internal/testpg"
)

// The tests of package idemclient against a real idem serve: the client's
// half of the contract with the server's half, on both databases.

// clientHelperEnv makes the test binary the helper process of "the client
// dies" (clientHelper) instead of running tests.
const clientHelperEnv = "IDEM_TEST_CLIENT_HELPER"

// helperTransfer is the transfer the helper processes send. It has no id:
// the id is derived from the key, so only the key can make a resend the
// same transfer.
var helperTransfer = idemclient.TransferParams{DebitAccountID: "a", CreditAccountID: "b", Amount: 7, Currency: "EUR"}

// clientHelper is one process of "the client dies". "first" makes a key,
// stores it with its order (the file at IDEM_TEST_CLIENT_ORDER) before the
// first attempt, sends the transfer, and stops once idem has answered,
// before anything reads the answer: the test SIGKILLs it there. "second"
// is the process started after the crash: it sends the transfer again
// with the stored key and prints what it got.
func clientHelper() int {
	mode, base, order := os.Getenv(clientHelperEnv), os.Getenv("IDEM_TEST_CLIENT_URL"), os.Getenv("IDEM_TEST_CLIENT_ORDER")
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "client helper:", err); return 1 }
	switch mode {
	case "first":
		key, err := idemclient.NewKey()
		if err != nil {
			return fail(err)
		}
		if err := writeSynced(order, key); err != nil {
			return fail(err)
		}
		c, err := idemclient.New(idemclient.Config{BaseURL: base, Base: stallOnAnswer{http.DefaultTransport}})
		if err != nil {
			return fail(err)
		}
		_, err = c.CreateTransfer(ctx, helperTransfer, idemclient.WithKey(key))
		return fail(fmt.Errorf("the call returned (%v): it should have stalled", err))
	case "second":
		key, err := os.ReadFile(order)
		if err != nil {
			return fail(err)
		}
		c, err := idemclient.New(idemclient.Config{BaseURL: base})
		if err != nil {
			return fail(err)
		}
		tr, err := c.CreateTransfer(ctx, helperTransfer, idemclient.WithKey(string(key)))
		if err != nil {
			return fail(err)
		}
		if err := json.NewEncoder(os.Stdout).Encode(helperAnswer{Transfer: tr, Replayed: tr.Replayed, Key: string(key)}); err != nil {
			return fail(err)
		}
		return 0
	}
	return fail(fmt.Errorf("%s=%q", clientHelperEnv, mode))
}

type helperAnswer struct {
	Transfer *idemclient.Transfer `json:"transfer"`
	Replayed bool                 `json:"replayed"`
	Key      string               `json:"key"`
}

// writeSynced writes s to path and syncs it: the order's record is
// durable before the first attempt.
func writeSynced(path, s string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// stallOnAnswer says "answered" on stdout once idem's answer has arrived,
// and holds it there unread.
type stallOnAnswer struct{ base http.RoundTripper }

func (s stallOnAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	fmt.Println("answered", resp.StatusCode)
	select {}
}

// The client dies: a first process sends a transfer under a key it stored
// with its order and is SIGKILLed before reading the answer; a second
// sends it again with the stored key. The ledger holds one transfer, and
// the second process gets the first's answer, marked replayed.
func TestClientDies(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, _ := serveDB(t, dialect, nil)
		account(t, p.URL, "a", "EUR")
		account(t, p.URL, "b", "EUR")
		order := filepath.Join(t.TempDir(), "order")
		env := func(mode string) []string {
			return append(os.Environ(), clientHelperEnv+"="+mode, "IDEM_TEST_CLIENT_URL="+p.URL, "IDEM_TEST_CLIENT_ORDER="+order)
		}

		first := exec.Command(os.Args[0])
		first.Env = env("first")
		out, err := first.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		first.Stderr = &stderr
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "answered 201\n" {
			_ = first.Process.Kill()
			_ = first.Wait()
			t.Fatalf("first process: %q %v\n%s", line, err, stderr.String())
		}
		if err := first.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := first.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("first process exited: %v", err)
		}

		second := exec.Command(os.Args[0])
		second.Env = env("second")
		b, err := second.Output()
		if err != nil {
			t.Fatalf("second process: %v %s", err, stderrOf(err))
		}
		var got helperAnswer
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("second process printed %q: %v", b, err)
		}
		if !got.Replayed || got.Transfer == nil || got.Transfer.Amount != 7 {
			t.Fatalf("second process got %s; want the first's transfer, replayed", b)
		}
		stored := call(t, "GET", p.URL+"/v1/transfers/"+got.Transfer.ID, "", nil)
		mustStatus(t, stored, http.StatusOK)
		var st idemclient.Transfer
		if err := json.Unmarshal(stored.Body, &st); err != nil {
			t.Fatal(err)
		}
		if !st.CreatedAt.Equal(got.Transfer.CreatedAt) || st.Amount != 7 {
			t.Fatalf("stored %s; the second process got %+v", stored.Body, got.Transfer)
		}
		assertCredits(t, p.URL, "b", 7, 1)
	})
}

// assertCredits checks account id's credits and its number of entries:
// the ledger's own count of what happened.
func assertCredits(t *testing.T, base, id string, credits int64, entries int) {
	t.Helper()
	c, err := idemclient.New(idemclient.Config{BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.GetAccount(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for after := ""; ; {
		page, err := c.Entries(t.Context(), id, idemclient.EntriesParams{Limit: 1000, After: after})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Data)
		if page.NextCursor == "" {
			break
		}
		after = page.NextCursor
	}
	if a.CreditsPosted != credits || n != entries {
		t.Fatalf("account %s: credits %d in %d entries; want %d in %d", id, a.CreditsPosted, n, credits, entries)
	}
}

// freeAddr is a loopback address nobody listens on, for a server that
// must come back on the same one.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// killServe SIGKILLs p and waits for it to be gone.
func killServe(t *testing.T, p *proc) {
	t.Helper()
	p.signal(syscall.SIGKILL)
	_ = p.wait(30 * time.Second)
}

// The server dies: idem serve is SIGKILLed mid-burst while clients keep
// sending, and comes back on the same address. Every call returns the
// stored answer or a final error; a final error is settled by sending
// again with the stored key; then every transfer asked for exists exactly
// once.
func TestClientServerDies(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		addr := freeAddr(t)
		db := dbURL(t, dialect)
		args := []string{"serve", "--addr", addr, "--db", db}
		p := start(t, nil, args...)
		account(t, p.URL, "a", "EUR")
		account(t, p.URL, "b", "EUR")
		c, err := idemclient.New(idemclient.Config{BaseURL: p.URL, Policy: idemclient.Policy{
			MaxAttempts: 60, BaseDelay: 20 * time.Millisecond, MaxDelay: 500 * time.Millisecond, AttemptTimeout: 20 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}

		const workers, each = 4, 20
		n := workers * each
		keys := make([]string, n) // the orders' stored keys, made before any call
		for i := range keys {
			if keys[i], err = idemclient.NewKey(); err != nil {
				t.Fatal(err)
			}
		}
		params := func(i int) idemclient.TransferParams {
			return idemclient.TransferParams{DebitAccountID: "a", CreditAccountID: "b", Amount: int64(i + 1), Currency: "EUR"}
		}
		answers := make([]*idemclient.Transfer, n)
		errs := make([]error, n)
		var done atomic.Int64
		third := make(chan struct{})
		var once sync.Once
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for j := range each {
					i := w*each + j
					answers[i], errs[i] = c.CreateTransfer(t.Context(), params(i), idemclient.WithKey(keys[i]))
					if done.Add(1) >= int64(n/3) {
						once.Do(func() { close(third) })
					}
				}
			})
		}
		<-third
		killServe(t, p)
		p = start(t, nil, args...)
		wg.Wait()

		var final int
		for i := range n {
			switch {
			case errs[i] == nil && answers[i].Status == http.StatusCreated && answers[i].Amount == int64(i+1):
			case errs[i] != nil && errors.Is(errs[i], idemclient.ErrBudgetExhausted):
				final++
				if answers[i], errs[i] = c.CreateTransfer(t.Context(), params(i), idemclient.WithKey(keys[i])); errs[i] != nil {
					t.Fatalf("transfer %d settled with its key: %v", i, errs[i])
				}
			default:
				t.Fatalf("transfer %d: %+v, %v; want the stored answer or a final error", i, answers[i], errs[i])
			}
		}
		ids := map[string]bool{}
		var sum int64
		for i, a := range answers {
			got, err := c.GetTransfer(t.Context(), a.ID)
			if err != nil || got.Amount != int64(i+1) || !got.CreatedAt.Equal(a.CreatedAt) {
				t.Fatalf("transfer %d answered %+v; stored %+v, %v", i, a, got, err)
			}
			ids[a.ID] = true
			sum += int64(i + 1)
		}
		if len(ids) != n {
			t.Fatalf("%d distinct transfers for %d asked", len(ids), n)
		}
		assertCredits(t, p.URL, "b", sum, n)
		t.Logf("%s: %d transfers, %d ended in a final error and were settled by their key", dialect, n, final)
	})
}

// hookClock is an injected clock whose sleep runs a hook (the test's
// next step) instead of sleeping, and records the waits.
type hookClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
	hook  func(n int)
}

func (c *hookClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *hookClock) policy(p idemclient.Policy) idemclient.Policy {
	p.Now = c.Now
	p.Sleep = func(ctx context.Context, d time.Duration) error {
		c.mu.Lock()
		c.waits = append(c.waits, d)
		c.now = c.now.Add(d)
		n := len(c.waits)
		c.mu.Unlock()
		if c.hook != nil {
			c.hook(n)
		}
		return ctx.Err()
	}
	return p
}

// attempts counts the attempts a Transport makes, with their statuses.
type attempts struct {
	mu       sync.Mutex
	statuses []int
}

func (a *attempts) observe(x idemclient.Attempt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.statuses = append(a.statuses, x.Status)
}

func (a *attempts) get() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.statuses...)
}

// 409 in flight, as the table says: a first copy holds its commit (the
// keeper.before_commit failpoint), the client's copy under the same key
// is answered 409 with Retry-After, waits exactly that, and while it
// waits the server dies before committing and comes back; the retry is
// then the first arrival. One transfer in the ledger.
func TestClientInFlight(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		addr := freeAddr(t)
		db := dbURL(t, dialect)
		args := []string{"serve", "--addr", addr, "--db", db, "--in-flight-wait", "200ms"}
		p := start(t, nil, args...)
		account(t, p.URL, "a", "EUR")
		account(t, p.URL, "b", "EUR")
		killServe(t, p)
		p = start(t, []string{"IDEM_FAILPOINT=keeper.before_commit", "IDEM_FAILPOINT_HOLD=1m"}, args...)

		const key = "order-409"
		held := make(chan struct{})
		go func() {
			defer close(held)
			req, _ := http.NewRequest("POST", p.URL+"/v1/transfers",
				strings.NewReader(`{"debit_account_id":"a","credit_account_id":"b","amount":7,"currency":"EUR"}`))
			req.Header.Set("Idempotency-Key", key)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close() // the server dies first: not expected
			}
		}()
		waitFor(t, func() bool { return strings.Contains(p.Stderr(), "failpoint: keeper.before_commit") })

		clock := &hookClock{now: time.Now()}
		clock.hook = func(n int) {
			if n == 1 {
				killServe(t, p)
				<-held
				p = start(t, nil, args...)
			}
		}
		var seen attempts
		c, err := idemclient.New(idemclient.Config{BaseURL: p.URL,
			Policy: clock.policy(idemclient.Policy{OnAttempt: seen.observe})})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := c.CreateTransfer(t.Context(), helperTransfer, idemclient.WithKey(key))
		if err != nil {
			t.Fatalf("%v (attempts %v)", err, seen.get())
		}
		if got := seen.get(); len(got) != 2 || got[0] != http.StatusConflict || got[1] != http.StatusCreated {
			t.Fatalf("attempts %v; want [409 201]", got)
		}
		if len(clock.waits) != 1 || clock.waits[0] != time.Second {
			t.Fatalf("waits %v; want the Retry-After, [1s]", clock.waits)
		}
		if tr.Replayed || tr.Amount != 7 {
			t.Fatalf("transfer %+v; want a first arrival", tr)
		}
		assertCredits(t, p.URL, "b", 7, 1)
	})
}

// 503 with Retry-After from a stopped database, as the table says: the
// client waits the Retry-After and sends again with its key once the
// database is back; the transfer is made once. A POST whose body cannot
// be replayed is sent once, and its 503 is the caller's.
func TestClientDatabaseStopped(t *testing.T) {
	t.Parallel()
	pg := testpg.NewCluster(t)
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", pg.URL)
	account(t, p.URL, "a", "EUR")
	account(t, p.URL, "b", "EUR")
	pg.Pause(t)

	var once attempts
	tr, err := idemclient.NewTransport(nil, idemclient.Policy{OnAttempt: once.observe})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", p.URL+"/v1/transfers",
		io.MultiReader(strings.NewReader(`{"debit_account_id":"a","credit_account_id":"b","amount":1,"currency":"EUR"}`)))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := once.get(); resp.StatusCode != http.StatusServiceUnavailable || len(got) != 1 {
		t.Fatalf("a body that cannot be replayed: %d after attempts %v; want one 503", resp.StatusCode, got)
	}

	clock := &hookClock{now: time.Now()}
	clock.hook = func(n int) {
		if n == 1 {
			pg.Resume(t)
			waitFor(t, func() bool { return call(t, "GET", p.URL+"/readyz", "", nil).Status == http.StatusOK })
		}
	}
	var seen attempts
	c, err := idemclient.New(idemclient.Config{BaseURL: p.URL, Policy: clock.policy(idemclient.Policy{OnAttempt: seen.observe})})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.CreateTransfer(t.Context(), helperTransfer, idemclient.WithKey("order-503"))
	if err != nil {
		t.Fatalf("%v (attempts %v)", err, seen.get())
	}
	if a := seen.get(); len(a) != 2 || a[0] != http.StatusServiceUnavailable || a[1] != http.StatusCreated {
		t.Fatalf("attempts %v; want [503 201]", a)
	}
	if len(clock.waits) != 1 || clock.waits[0] != time.Second {
		t.Fatalf("waits %v; want the Retry-After, [1s]", clock.waits)
	}
	if got.Replayed {
		t.Fatal("a 503 stored nothing, yet the retry was a replay")
	}
	assertCredits(t, p.URL, "b", 7, 1)
}

// 429 and 422 against the real server, as the table says: a gateway's 429
// with an HTTP-date Retry-After is waited to that date and the transfer
// made once; a key reused with another payload is refused 422 after one
// attempt, and nothing more is written.
func TestClientRateLimitedAndReused(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, _ := serveDB(t, dialect, nil)
		account(t, p.URL, "a", "EUR")
		account(t, p.URL, "b", "EUR")

		clock := &hookClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
		target, _ := url.Parse(p.URL)
		proxy := httputil.NewSingleHostReverseProxy(target)
		var limited atomic.Bool
		gateway := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == "POST" && limited.CompareAndSwap(false, true) {
				w.Header().Set("Retry-After", clock.Now().Add(3*time.Second).Format(http.TimeFormat))
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			proxy.ServeHTTP(w, r)
		})}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = gateway.Serve(l) }()
		t.Cleanup(func() { _ = gateway.Close() })

		var seen attempts
		c, err := idemclient.New(idemclient.Config{BaseURL: "http://" + l.Addr().String(),
			Policy: clock.policy(idemclient.Policy{OnAttempt: seen.observe})})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := c.CreateTransfer(t.Context(), helperTransfer, idemclient.WithKey("order-429"))
		if err != nil {
			t.Fatal(err)
		}
		if a := seen.get(); len(a) != 2 || a[0] != http.StatusTooManyRequests || a[1] != http.StatusCreated || tr.Replayed {
			t.Fatalf("attempts %v, replayed %v; want [429 201], a first arrival", a, tr.Replayed)
		}
		if len(clock.waits) != 1 || clock.waits[0] != 3*time.Second {
			t.Fatalf("waits %v; want until the Retry-After date, [3s]", clock.waits)
		}

		other := helperTransfer
		other.Amount = 8
		_, err = c.CreateTransfer(t.Context(), other, idemclient.WithKey("order-429"))
		var pr *idemclient.Problem
		if !errors.Is(err, idemclient.ErrIdempotencyKeyReused) || !errors.As(err, &pr) || pr.Status != http.StatusUnprocessableEntity {
			t.Fatalf("a reused key: %v; want 422 idempotency_key_reused", err)
		}
		if a := seen.get(); len(a) != 3 || len(clock.waits) != 1 {
			t.Fatalf("attempts %v, waits %v: the 422 was retried", a, clock.waits)
		}
		assertCredits(t, p.URL, "b", 7, 1)
	})
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// Every typed call against the real server, its answers read into the
// client's types and checked against the ledger's effects.
func TestClientTypedCalls(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, _ := serveDB(t, dialect, nil)
		ctx := t.Context()
		c, err := idemclient.New(idemclient.Config{BaseURL: p.URL})
		if err != nil {
			t.Fatal(err)
		}
		bank, err := c.CreateAccount(ctx, idemclient.AccountParams{ID: "bank", Currency: "EUR"}, idemclient.WithKey("acct-bank"))
		if err != nil || bank.ID != "bank" || bank.Replayed {
			t.Fatalf("bank: %+v, %v", bank, err)
		}
		again, err := c.CreateAccount(ctx, idemclient.AccountParams{ID: "bank", Currency: "EUR"}, idemclient.WithKey("acct-bank"))
		if err != nil || !again.Replayed || !again.CreatedAt.Equal(bank.CreatedAt) {
			t.Fatalf("bank again: %+v, %v", again, err)
		}
		alice, err := c.CreateAccount(ctx, idemclient.AccountParams{ID: "alice", Currency: "EUR",
			Flags: &idemclient.AccountFlags{DebitsMustNotExceedCredits: true}, Metadata: json.RawMessage(`{"tier":"gold"}`)})
		if err != nil || !alice.Flags.DebitsMustNotExceedCredits || string(alice.Metadata) != `{"tier":"gold"}` {
			t.Fatalf("alice: %+v, %v", alice, err)
		}

		t1, err := c.CreateTransfer(ctx, idemclient.TransferParams{ID: "t1", DebitAccountID: "bank", CreditAccountID: "alice",
			Amount: 5000, Currency: "EUR"}, idemclient.WithKey("order-t1"))
		if err != nil || t1.ID != "t1" || t1.Status != http.StatusCreated {
			t.Fatalf("t1: %+v, %v", t1, err)
		}
		_, err = c.CreateTransfer(ctx, idemclient.TransferParams{DebitAccountID: "alice", CreditAccountID: "bank",
			Amount: 9000, Currency: "EUR"}, idemclient.WithKey("order-poor"))
		var pr *idemclient.Problem
		if !errors.Is(err, idemclient.ErrInsufficientFunds) || !errors.As(err, &pr) || pr.Replayed {
			t.Fatalf("overdraft: %v", err)
		}
		_, err = c.CreateTransfer(ctx, idemclient.TransferParams{DebitAccountID: "alice", CreditAccountID: "bank",
			Amount: 9000, Currency: "EUR"}, idemclient.WithKey("order-poor"))
		if !errors.As(err, &pr) || !pr.Replayed || pr.Code != "insufficient_funds" {
			t.Fatalf("the overdraft again: %v; want its stored refusal, replayed", err)
		}

		half := int64(2000)
		rev, err := c.ReverseTransfer(ctx, "t1", idemclient.ReversalParams{Amount: &half, Reason: "refund"}, idemclient.WithKey("refund-t1"))
		if err != nil || rev.ReversesID != "t1" || rev.Amount != 2000 || rev.DebitAccountID != "alice" {
			t.Fatalf("reversal: %+v, %v", rev, err)
		}
		got, err := c.GetTransfer(ctx, "t1")
		if err != nil || len(got.Reversals) != 1 || got.Reversals[0].ID != rev.ID {
			t.Fatalf("t1 with its reversals: %+v, %v", got, err)
		}

		batch, err := c.CreateTransfers(ctx, []idemclient.TransferParams{
			{ID: "b1", DebitAccountID: "bank", CreditAccountID: "alice", Amount: 100, Currency: "EUR"},
			{ID: "b2", DebitAccountID: "alice", CreditAccountID: "bank", Amount: 1 << 40, Currency: "EUR"},
		}, idemclient.WithKey("batch-1"))
		if err != nil || len(batch.Data) != 2 || batch.Data[0].Status != "created" || batch.Data[1].Status != "refused" ||
			!errors.Is(batch.Data[1].Error, idemclient.ErrInsufficientFunds) {
			t.Fatalf("batch: %+v, %v", batch, err)
		}

		// alice: +5000 -2000 +100.
		now, err := c.Balance(ctx, "alice", nil)
		if err != nil || now.Balance != 3100 {
			t.Fatalf("alice now: %+v, %v", now, err)
		}
		before, err := c.Balance(ctx, "alice", &t1.CreatedAt)
		if err != nil || before.Balance != 5000 {
			t.Fatalf("alice as of t1: %+v, %v", before, err)
		}
		zero := time.Time{}
		if b, err := c.Balance(ctx, "alice", &zero); err != nil || b.Balance != 0 {
			t.Fatalf("alice as of the zero time: %+v, %v", b, err)
		}
		page, err := c.Entries(ctx, "alice", idemclient.EntriesParams{Limit: 2})
		if err != nil || len(page.Data) != 2 || page.NextCursor == "" || page.Data[0].TransferID != "b1" {
			t.Fatalf("alice's entries: %+v, %v", page, err)
		}
		rest, err := c.Entries(ctx, "alice", idemclient.EntriesParams{Limit: 2, After: page.NextCursor})
		if err != nil || len(rest.Data) != 1 || rest.Data[0].TransferID != "t1" || rest.NextCursor != "" {
			t.Fatalf("alice's last entry: %+v, %v", rest, err)
		}
		types := map[string]int{}
		for after := ""; ; {
			ev, err := c.Events(ctx, idemclient.EventsParams{After: after, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ev.Data {
				types[e.Type]++
			}
			if ev.NextCursor == "" || len(ev.Data) == 0 {
				break
			}
			after = ev.NextCursor
		}
		if types["account.created"] != 2 || types["transfer.created"] != 2 || types["transfer.reversed"] != 1 {
			t.Fatalf("events %v", types)
		}
		if _, err := c.GetAccount(ctx, "nobody"); !errors.Is(err, idemclient.ErrNotFound) {
			t.Fatalf("a missing account: %v", err)
		}
	})
}
