package webhookout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/webhookout"
)

// benchEndpoints is how many endpoints each event fans out to.
const benchEndpoints = 3

// countingReceivers are benchEndpoints loopback receivers answering 204,
// and their count of requests.
func countingReceivers(b *testing.B) ([]string, *atomic.Int64) {
	var n atomic.Int64
	urls := make([]string, benchEndpoints)
	for i := range urls {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			n.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		b.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	return urls, &n
}

// BenchmarkFanOutDelivery measures events × endpoints delivered a second:
// b.N events handed to the fan-out in batches of 500, each to
// benchEndpoints endpoints, signed, sent and recorded. Compare it with
// BenchmarkPlainHTTPClient (docs/benchmarks.md, "Webhooks to tenants'
// endpoints").
func BenchmarkFanOutDelivery(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			d := drivertest.Open(b, dialect)
			urls, got := countingReceivers(b)
			// 64 attempts in flight, however they fall on the endpoints:
			// the plain client's concurrency.
			fan := delivering(b, d, webhookout.DelivererConfig{Concurrency: 64, PerEndpoint: 64}, urls)
			ctx := context.Background()

			payload := json.RawMessage(`{"id":"tr_1","amount":500,"currency":"EUR","debit_account_id":"a","credit_account_id":"b"}`)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i += 500 {
				msgs := make([]outbox.Message, 0, 500)
				for j := i; j < min(i+500, b.N); j++ {
					msgs = append(msgs, outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "transfer.created",
						Payload: payload, CreatedAt: time.Now()})
				}
				if errs := fan.Publish(ctx, msgs); errs[0] != nil {
					b.Fatal(errs[0])
				}
			}
			want := int64(b.N * benchEndpoints)
			for got.Load() < want {
				time.Sleep(time.Millisecond)
			}
			b.ReportMetric(float64(want)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
}

// BenchmarkPlainHTTPClient is the ceiling: a plain Go HTTP client posting
// the same number of bodies of the same size to the same receivers, 64 at
// once, with nothing stored.
func BenchmarkPlainHTTPClient(b *testing.B) {
	urls, got := countingReceivers(b)
	body := []byte(`{"type":"transfer.created","timestamp":"2026-12-06T07:00:00Z","data":{"id":"tr_1","amount":500,"currency":"EUR","debit_account_id":"a","credit_account_id":"b"}}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range jobs {
				resp, err := client.Post(u, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		for _, u := range urls {
			jobs <- u
		}
	}
	close(jobs)
	wg.Wait()
	b.ReportMetric(float64(got.Load())/time.Since(start).Seconds(), "deliveries/s")
	client.CloseIdleConnections()
}

// BenchmarkEndpointDown measures what one endpoint down for the whole run
// costs the others: b.N events, 2 every 10ms, to two healthy endpoints,
// alone and then beside a third whose receiver never answers (each
// attempt to it holds a slot until the timeout, and is retried). It
// reports the healthy endpoints' p99 from the hand-over to the fan-out to
// the receiver, in both runs, and their ratio (target ≤ 2). The test that
// asserts the reason, counting rather than timing, is
// TestSlowEndpointDoesNotDelayOthers.
func BenchmarkEndpointDown(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			alone := deliveryP99(b, drivertest.Open(b, dialect), false)
			beside := deliveryP99(b, drivertest.Open(b, dialect), true)
			b.ReportMetric(float64(alone.Microseconds())/1000, "p99-alone-ms")
			b.ReportMetric(float64(beside.Microseconds())/1000, "p99-beside-down-ms")
			b.ReportMetric(float64(beside)/float64(max(alone, time.Microsecond)), "p99-ratio")
		})
	}
}

// deliveryP99 delivers b.N events to two healthy endpoints (and, with
// down, to a third that never answers) and returns the healthy ones' p99
// latency from the fan-out's hand-over to the receiver.
func deliveryP99(b *testing.B, d driver.Driver, down bool) time.Duration {
	var mu sync.Mutex
	published := map[string]time.Time{}
	var latencies []time.Duration
	var urls []string
	for range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			latencies = append(latencies, time.Since(published[r.Header.Get("webhook-id")]))
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		b.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	if down {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		b.Cleanup(srv.Close)
		b.Cleanup(func() { close(release) }) // before srv.Close, which waits for its handlers
		urls = append(urls, srv.URL)
	}
	fan := delivering(b, d, webhookout.DelivererConfig{Timeout: time.Second,
		Schedule: []time.Duration{0, 200 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond}}, urls)
	ctx := context.Background()

	payload := json.RawMessage(`{"id":"tr_1","amount":500}`)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < b.N; i += 2 {
		<-tick.C
		var msgs []outbox.Message
		mu.Lock()
		for range min(2, b.N-i) {
			m := outbox.Message{ID: outbox.NewID(), Tenant: "acme", Type: "transfer.created", Payload: payload, CreatedAt: time.Now()}
			published[m.ID] = time.Now()
			msgs = append(msgs, m)
		}
		mu.Unlock()
		if errs := fan.Publish(ctx, msgs); errs[0] != nil {
			b.Fatal(errs[0])
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := len(latencies)
		mu.Unlock()
		if n >= 2*b.N {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d deliveries to the healthy endpoints", n, 2*b.N)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(latencies)
	return latencies[(len(latencies)*99)/100]
}

// delivering runs a deliverer of cfg (to loopback, polling every 5ms,
// logging nothing) until b ends, with one endpoint of tenant acme per
// url, and returns the fan-out that feeds it.
func delivering(b *testing.B, d driver.Driver, cfg webhookout.DelivererConfig, urls []string) *webhookout.FanOut {
	cfg.AllowNetworks, cfg.PollInterval, cfg.Logger = loopback, 5*time.Millisecond, slog.New(slog.DiscardHandler)
	w, err := webhookout.NewDeliverer(d, cfg)
	if err != nil {
		b.Fatal(err)
	}
	fan, err := webhookout.NewFanOut(d, webhookout.FanOutConfig{Written: w.Notify})
	if err != nil {
		b.Fatal(err)
	}
	eps, err := webhookout.New(d, webhookout.Config{AllowNetworks: loopback})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, u := range urls {
		if _, err := eps.Create(ctx, tx, "acme", webhookout.NewEndpoint{URL: u}); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(runCtx) }()
	b.Cleanup(func() { stop(); <-done })
	return fan
}

// BenchmarkPlainClientDurable is the least program doing the fan-out's
// work on PostgreSQL: the plain client's posts, with each delivery a row
// written durably first and its outcome recorded durably after, in
// batches as the deliverer makes them. Events come in batches of 500,
// their 3 × 500 delivery rows inserted in one transaction; 64 posts are in
// flight; a worker claims up to 64 pending rows (FOR UPDATE SKIP LOCKED)
// in one transaction, posts them, and marks them done in one more. No
// signatures, schedules, health, logs or leases: what remains of the
// deliverer's cost beside it is idem's own (docs/benchmarks.md,
// "Webhooks to tenants' endpoints").
func BenchmarkPlainClientDurable(b *testing.B) {
	d := drivertest.Open(b, "postgres")
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		b.Helper()
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	exec(`CREATE TABLE bench_deliveries (id bigserial PRIMARY KEY, url text NOT NULL, body bytea NOT NULL,
		state text NOT NULL DEFAULT 'pending', attempts int NOT NULL DEFAULT 0, updated_at timestamptz)`)
	urls, got := countingReceivers(b)
	body := []byte(`{"type":"transfer.created","timestamp":"2026-12-06T07:00:00Z","data":{"id":"tr_1","amount":500,"currency":"EUR","debit_account_id":"a","credit_account_id":"b"}}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	want := int64(b.N * benchEndpoints)
	var done atomic.Int64
	worker := func() {
		for done.Load() < want {
			tx, err := d.Begin(ctx, driver.BeginOptions{})
			if err != nil {
				b.Error(err)
				return
			}
			rows, err := tx.Query(ctx, `UPDATE bench_deliveries SET state = 'sending', attempts = attempts + 1
				WHERE id IN (SELECT id FROM bench_deliveries WHERE state = 'pending' ORDER BY id LIMIT 64 FOR UPDATE SKIP LOCKED)
				RETURNING id, url, body`)
			var ids []int64
			var targets []string
			var bodies [][]byte
			for err == nil && rows.Next() {
				var id int64
				var u string
				var bd []byte
				if err = rows.Scan(&id, &u, &bd); err == nil {
					ids, targets, bodies = append(ids, id), append(targets, u), append(bodies, bd)
				}
			}
			if rows != nil {
				rows.Close()
			}
			if err == nil {
				err = tx.Commit(ctx)
			}
			_ = tx.Rollback(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			if len(ids) == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			var wg sync.WaitGroup
			for i := range ids {
				wg.Go(func() {
					resp, err := client.Post(targets[i], "application/json", bytes.NewReader(bodies[i]))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				})
			}
			wg.Wait()
			exec(`UPDATE bench_deliveries SET state = 'done', updated_at = now() WHERE id = ANY($1)`, ids)
			done.Add(int64(len(ids)))
		}
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 { // the deliverer's turns: two at once
		wg.Go(worker)
	}
	for i := 0; i < b.N; i += 500 {
		n := min(i+500, b.N) - i
		us, bs := make([]string, 0, n*benchEndpoints), make([][]byte, 0, n*benchEndpoints)
		for range n {
			for _, u := range urls {
				us, bs = append(us, u), append(bs, body)
			}
		}
		exec(`INSERT INTO bench_deliveries (url, body) SELECT * FROM unnest($1::text[], $2::bytea[])`, us, bs)
	}
	wg.Wait()
	b.ReportMetric(float64(got.Load())/time.Since(start).Seconds(), "deliveries/s")
	client.CloseIdleConnections()
}
