// Command httpbench measures idem over HTTP for bench/run: first arrivals
// (every transfer new) and replays (every request a duplicate of a completed
// one), and serves their ceilings: for replays a Go HTTP server that
// answers every POST with a body of the same size and does nothing (noop);
// for first arrivals one that runs the one-statement ceiling's statement
// for each transfer, a batch of them to a commit (bound, in bound.go), and
// its counterpart on SQLite (bound-sqlite, in bound_sqlite.go); for cold
// replays one that reads each key's stored answer from PostgreSQL and
// answers it (stored, in stored.go).
//
//	httpbench noop  -addr 127.0.0.1:0 -body-bytes 300
//	httpbench bound -addr 127.0.0.1:0 -body-bytes 300 -db URL [-sql FILE] [-batch-max 128] [-trips 1] [-idem-work]
//	httpbench bound-sqlite -addr 127.0.0.1:0 -body-bytes 300 -db FILE [-accounts 1000] [-batch-max 128] [-idem-work]
//	httpbench stored -addr 127.0.0.1:0 -db URL [-scope default] [-operation 'POST /v1/transfers'] [-conns 16]
//	httpbench first  -target URL [-c 16] [-d 10s] [-accounts 1000]
//	httpbench replay -target URL [-c 16] [-d 10s] [-keys 1000]
//	httpbench seed   -target URL -keys 20000 -prefix cold
//	httpbench cold   -target URL [-c 16] -keys 20000 -prefix cold
//	httpbench tenants -target URL [-c 40] [-d 10s] [-rate 100] [-attack as_of|batches]
//
// seed creates one transfer per key prefix-0…prefix-(keys-1); cold then
// replays each of those keys exactly once, against a server that has not
// seen them (a second process, or one restarted), so that every replay
// misses the in-process cache: the redelivery hours later.
//
// tenants measures tenant B's latency alone and while tenant A's -c
// clients ask balances as of a moment 950 ms ahead, or (-attack batches)
// while A sends 1000-transfer batches and single transfers to its own hot
// account (tenants.go).
//
// first, replay and cold print one line: "ops/s=… p50_ms=… p99_ms=…
// errors=… cpu_s=…", cpu_s being the CPU time httpbench itself used.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: httpbench noop|bound|bound-sqlite|stored|first|replay|seed|cold|tenants [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	target := fs.String("target", "", "idem base URL (first, replay)")
	clients := fs.Int("c", 16, "concurrent clients")
	dur := fs.Duration("d", 10*time.Second, "measurement duration")
	accounts := fs.Int("accounts", 1000, "accounts transfers move between (first; bound-sqlite creates them)")
	keys := fs.Int("keys", 1000, "completed keys replayed (replay)")
	expectReplay := fs.Bool("expect-replay", true, "require Idempotent-Replayed: true (replay; false for the no-op ceiling)")
	addr := fs.String("addr", "127.0.0.1:0", "listen address (noop, bound, bound-sqlite, stored)")
	bodyBytes := fs.Int("body-bytes", 300, "response body size (noop, bound, bound-sqlite)")
	prefix := fs.String("prefix", "cold", "key prefix (seed, cold)")
	db := fs.String("db", "", "PostgreSQL URL (bound, stored) or SQLite file (bound-sqlite)")
	script := fs.String("sql", "bench/pgbench/transfer_one_statement.sql", "pgbench script whose statement a transfer runs (bound)")
	batchMax := fs.Int("batch-max", 128, "most transfers one transaction carries (bound, bound-sqlite)")
	trips := fs.Int("trips", 1, "round trips a batch's transaction takes, its statements in the first and COMMIT in the last (bound)")
	idemWork := fs.Bool("idem-work", false, "also do idem's work for a first arrival: the key required, strict JSON, the keys' claims and stored answers (in three round trips on PostgreSQL) (bound, bound-sqlite)")
	scope := fs.String("scope", "default", "the stored answers' scope: the tenant idem keyed them under (stored)")
	operation := fs.String("operation", "POST /v1/transfers", "the stored answers' operation (stored)")
	conns := fs.Int("conns", 16, "connections of the pool (stored; idem's default)")
	rate := fs.Int("rate", 100, "tenant B's requests per second (tenants)")
	attack := fs.String("attack", "as_of", "tenant A's attack: as_of or batches (tenants)")
	_ = fs.Parse(os.Args[2:])

	var err error
	switch os.Args[1] {
	case "noop":
		err = noop(*addr, *bodyBytes)
	case "bound":
		err = bound(*addr, *db, *script, *batchMax, *bodyBytes, *trips, *idemWork)
	case "bound-sqlite":
		err = boundSQLite(*addr, *db, *accounts, *batchMax, *bodyBytes, *idemWork)
	case "stored":
		err = stored(*addr, *db, *scope, *operation, *conns)
	case "first":
		err = first(*target, *clients, *dur, *accounts)
	case "replay":
		err = replay(*target, *clients, *dur, *keys, *expectReplay)
	case "seed":
		err = seed(*target, *keys, *prefix)
	case "cold":
		err = cold(*target, *clients, *keys, *prefix)
	case "tenants":
		err = tenants(*target, *clients, *dur, *rate, *attack)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpbench:", err)
		os.Exit(1)
	}
}

// noop answers every POST with 201 and a fixed body: the replay ceiling.
func noop(addr string, size int) error {
	body := bytes.Repeat([]byte("x"), size)
	return serveCeiling(addr, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		created(w, body)
	})
}

// serveCeiling serves h on addr, printing the address for bench/run.
func serveCeiling(addr string, h http.HandlerFunc) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening http://%s\n", ln.Addr())
	return http.Serve(ln, h)
}

// created answers 201 with body, as idem answers a new transfer.
func created(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

var client = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute},
}

func post(url, key string, body []byte) (int, []byte, http.Header, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

func transferBody(a, b int) []byte {
	return fmt.Appendf(nil, `{"debit_account_id":"acc-%d","credit_account_id":"acc-%d","amount":100,"currency":"EUR"}`, a, b)
}

// setupAccounts creates acc-1…acc-n (idempotently: a rerun replays).
func setupAccounts(target string, n int) error {
	return parallel(16, n, func(i int) error {
		status, b, _, err := post(target+"/v1/accounts", fmt.Sprintf("bench-acc-%d", i+1),
			fmt.Appendf(nil, `{"id":"acc-%d","currency":"EUR"}`, i+1))
		if err == nil && status != http.StatusCreated {
			err = fmt.Errorf("create account: %d %s", status, b)
		}
		return err
	})
}

func first(target string, clients int, dur time.Duration, accounts int) error {
	if err := setupAccounts(target, accounts); err != nil {
		return err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var seq atomic.Int64
	half := accounts / 2
	return measure(clients, dur, func(r *rand.Rand) error {
		a, b := 1+r.IntN(half), half+1+r.IntN(accounts-half)
		status, body, _, err := post(target+"/v1/transfers", fmt.Sprintf("bench-%s-%d", run, seq.Add(1)), transferBody(a, b))
		if err == nil && status != http.StatusCreated {
			err = fmt.Errorf("transfer: %d %s", status, body)
		}
		return err
	})
}

func replay(target string, clients int, dur time.Duration, keys int, expectReplay bool) error {
	if err := setupAccounts(target, 2); err != nil {
		return err
	}
	body := transferBody(1, 2)
	if err := parallel(16, keys, func(i int) error {
		status, b, _, err := post(target+"/v1/transfers", fmt.Sprintf("bench-replay-%d", i), body)
		if err == nil && status != http.StatusCreated {
			err = fmt.Errorf("transfer: %d %s", status, b)
		}
		return err
	}); err != nil {
		return err
	}
	return measure(clients, dur, func(r *rand.Rand) error {
		status, b, h, err := post(target+"/v1/transfers", fmt.Sprintf("bench-replay-%d", r.IntN(keys)), body)
		if err == nil && (status != http.StatusCreated || (expectReplay && h.Get("Idempotent-Replayed") != "true")) {
			err = fmt.Errorf("replay: %d %v %s", status, h, b)
		}
		return err
	})
}

// seed creates one transfer per key for cold: key prefix-i moves
// coldAmount(i) from acc-1 to acc-2.
func seed(target string, keys int, prefix string) error {
	if err := setupAccounts(target, 2); err != nil {
		return err
	}
	return parallel(16, keys, func(i int) error {
		status, b, _, err := post(target+"/v1/transfers", fmt.Sprintf("%s-%d", prefix, i), coldBody(i))
		if err == nil && status != http.StatusCreated {
			err = fmt.Errorf("transfer: %d %s", status, b)
		}
		return err
	})
}

// coldBody differs per key, as a real client's requests do.
func coldBody(i int) []byte {
	return fmt.Appendf(nil, `{"debit_account_id":"acc-1","credit_account_id":"acc-2","amount":%d,"currency":"EUR"}`, 100+i%1000)
}

// cold replays every seeded key once and requires each answer to be a
// replay.
func cold(target string, clients, keys int, prefix string) error {
	var next atomic.Int64
	return measureUntil(clients, 10*time.Minute, func(*rand.Rand) (bool, error) {
		i := int(next.Add(1) - 1)
		if i >= keys {
			return false, nil
		}
		status, b, h, err := post(target+"/v1/transfers", fmt.Sprintf("%s-%d", prefix, i), coldBody(i))
		if err == nil && (status != http.StatusCreated || h.Get("Idempotent-Replayed") != "true") {
			err = fmt.Errorf("replay: %d %v %s", status, h, b)
		}
		return true, err
	})
}

// measure runs op from clients goroutines for dur and prints throughput and
// latency percentiles.
func measure(clients int, dur time.Duration, op func(r *rand.Rand) error) error {
	return measureUntil(clients, dur, func(r *rand.Rand) (bool, error) { return true, op(r) })
}

// measureUntil is measure whose op may also say there is no more work
// (false): its client stops, and the run ends when every client has, or
// at dur.
func measureUntil(clients int, dur time.Duration, op func(r *rand.Rand) (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errCount  atomic.Int64
		firstErr  atomic.Value
		wg        sync.WaitGroup
	)
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			var local []time.Duration
			for ctx.Err() == nil {
				t0 := time.Now()
				more, err := op(r)
				if !more {
					break
				}
				if err != nil {
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(latencies) == 0 {
		if e, ok := firstErr.Load().(error); ok {
			return e
		}
		return errors.New("no request completed")
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Printf("ops/s=%d p50_ms=%.2f p99_ms=%.2f errors=%d cpu_s=%.1f\n",
		int(float64(len(latencies))/elapsed.Seconds()), pct(0.50), pct(0.99), errCount.Load(), cpu.Seconds())
	if e, ok := firstErr.Load().(error); ok {
		fmt.Fprintln(os.Stderr, "httpbench: first error:", e)
	}
	return nil
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(workers, n int, fn func(i int) error) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		err  error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if e := fn(i); e != nil {
					mu.Lock()
					err = errors.Join(err, e)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return err
}
