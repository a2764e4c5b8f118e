package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tenants' bearer tokens: the server under test is started with
// --api-keys a:<tokenA>,b:<tokenB>.
const (
	benchTokenA = "bench-tenant-a-key-0123456789"
	benchTokenB = "bench-tenant-b-key-0123456789"
)

// tenants measures what one tenant's load does to another's latency (issue
// 35's two-tenant scenarios): tenant B sends a steady rate of requests on
// accounts of its own, first alone ("calm") and then under tenant A's
// attack. With attack "as_of", B's requests are half balance reads, half
// transfers, and A's attackers loop on balance reads as of a moment
// 950 ms ahead; B's attacked p99 is held to 2 × its calm p99 + 50 ms.
// With attack "batches", B sends single transfers, and A's attackers
// (twelve of them at most) loop on 1000-transfer batches into A's hot
// account while eight more send single transfers into it, waiting on the
// lock the batches hold; B's attacked p99 is held to 4 × its calm p99 +
// 200 ms. It prints B's p50 and p99 in each phase, B's 5xx answers, the
// bound, and A's requests answered.
func tenants(target string, attackers int, dur time.Duration, rate int, attack string) error {
	if attack != "as_of" && attack != "batches" {
		return fmt.Errorf("unknown attack %q (as_of or batches)", attack)
	}
	for _, token := range []string{benchTokenA, benchTokenB} {
		for i := 1; i <= 2; i++ {
			st, b, err := tenantDo(token, http.MethodPost, target+"/v1/accounts", fmt.Sprintf("bench-acc-%d", i),
				fmt.Sprintf(`{"id":"acc-%d","currency":"EUR"}`, i))
			if err != nil || st != http.StatusCreated {
				return fmt.Errorf("create account: %d %s %v", st, b, err)
			}
		}
	}
	transfersOnly := attack == "batches"
	calm, err := steadyB(target, dur/2, rate, transfersOnly)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg             sync.WaitGroup
		aDone, aNon200 atomic.Int64
	)
	if attack == "batches" {
		attackBatches(ctx, &wg, target, min(attackers, 12), 8, &aDone, &aNon200)
		attackers = 0
	}
	for range attackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				at := time.Now().Add(950 * time.Millisecond).UTC().Format(time.RFC3339Nano)
				st, _, err := tenantDo(benchTokenA, http.MethodGet, target+"/v1/accounts/acc-2/balance?as_of="+url.QueryEscape(at), "", "")
				if err == nil && st != http.StatusOK {
					aNon200.Add(1)
				}
				aDone.Add(1)
			}
		}()
	}
	time.Sleep(time.Second) // every attacker is waiting on a moment, or holds the hot account
	attacked, err := steadyB(target, dur/2, rate, transfersOnly)
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	bound := 2*calm.p99 + 50
	if attack == "batches" {
		bound = 4*calm.p99 + 200
	}
	fmt.Printf("calm_p50_ms=%.2f calm_p99_ms=%.2f attacked_p50_ms=%.2f attacked_p99_ms=%.2f bound_ms=%.2f b_5xx=%d a_requests=%d a_non2xx=%d\n",
		calm.p50, calm.p99, attacked.p50, attacked.p99, bound, calm.errs5xx+attacked.errs5xx, aDone.Load(), aNon200.Load())
	return nil
}

// attackBatches starts tenant A's group-commit attack: batchers loop on
// batches of 1000 transfers into A's account acc-2 (each holding its lock
// while it writes), singles loop on single transfers into it.
func attackBatches(ctx context.Context, wg *sync.WaitGroup, target string, batchers, singles int, done, non2xx *atomic.Int64) {
	run := fmt.Sprint(time.Now().UnixNano())
	var seq atomic.Int64
	var batch strings.Builder
	batch.WriteString(`{"transfers":[`)
	for j := range 1000 {
		if j > 0 {
			batch.WriteByte(',')
		}
		batch.WriteString(`{"debit_account_id":"acc-1","credit_account_id":"acc-2","amount":1,"currency":"EUR"}`)
	}
	batch.WriteString(`]}`)
	loop := func(path, body string, want int) {
		defer wg.Done()
		for ctx.Err() == nil {
			st, _, err := tenantDo(benchTokenA, http.MethodPost, target+path, fmt.Sprintf("bench-a-%s-%d", run, seq.Add(1)), body)
			if err == nil && st != want {
				non2xx.Add(1)
			}
			done.Add(1)
		}
	}
	for range batchers {
		wg.Add(1)
		go loop("/v1/transfers/batch", batch.String(), http.StatusOK)
	}
	for range singles {
		wg.Add(1)
		go loop("/v1/transfers", `{"debit_account_id":"acc-1","credit_account_id":"acc-2","amount":1,"currency":"EUR"}`, http.StatusCreated)
	}
}

type phase struct {
	p50, p99 float64
	errs5xx  int64
}

// steadyB sends tenant B's requests at rate per second for dur, each on
// its own goroutine (an open loop: a slow answer does not slow the rate):
// half balance reads and half transfers, or transfers only.
func steadyB(target string, dur time.Duration, rate int, transfersOnly bool) (phase, error) {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs5xx   atomic.Int64
		firstErr  atomic.Value
		wg        sync.WaitGroup
		seq       atomic.Int64
	)
	run := fmt.Sprint(time.Now().UnixNano())
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for end := time.Now().Add(dur); time.Now().Before(end); <-tick.C {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := seq.Add(1)
			t0 := time.Now()
			var (
				st  int
				b   []byte
				err error
			)
			if n%2 == 0 && !transfersOnly {
				st, b, err = tenantDo(benchTokenB, http.MethodGet, target+"/v1/accounts/acc-2/balance", "", "")
			} else {
				st, b, err = tenantDo(benchTokenB, http.MethodPost, target+"/v1/transfers", fmt.Sprintf("bench-b-%s-%d", run, n),
					`{"debit_account_id":"acc-1","credit_account_id":"acc-2","amount":1,"currency":"EUR"}`)
			}
			elapsed := time.Since(t0)
			if err == nil && st >= 500 {
				errs5xx.Add(1) // counted and printed, not timed
				return
			}
			if err == nil && st >= 300 {
				err = fmt.Errorf("tenant B: %d %s", st, b)
			}
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			mu.Lock()
			latencies = append(latencies, elapsed)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return phase{}, e
	}
	if len(latencies) == 0 {
		return phase{}, fmt.Errorf("tenant B: no request completed")
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	return phase{p50: pct(0.5), p99: pct(0.99), errs5xx: errs5xx.Load()}, nil
}

func tenantDo(token, method, u, key, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
