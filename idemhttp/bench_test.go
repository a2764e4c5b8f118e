package idemhttp_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/drivertest"
)

// The benchmarks drive a real HTTP server in process from parallel clients
// (GOMAXPROCS goroutines), so ns/op is the inverse of throughput.
// BenchmarkNoop is the ceiling: the same routing, a handler that reads the
// body and answers a body of the replay's size, no middleware.

func BenchmarkNoop(b *testing.B) {
	d := drivertest.Open(b, "sqlite")
	e := newEnv(b, d, idem.Config{}, idemhttp.Config{})
	first := post(b, e.srv, "/orders", orderBody, "size")
	noop := httptest.NewServer(routed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(first.body)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(first.body)
	})))
	defer noop.Close()
	run(b, noop, func(int64) string { return "k" }, http.StatusCreated)
}

func BenchmarkFirst(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			e := newEnv(b, drivertest.Open(b, dialect), idem.Config{}, idemhttp.Config{})
			run(b, e.srv, func(i int64) string { return "k" + strconv.FormatInt(i, 10) }, http.StatusCreated)
			if n := countOrders(b, e.d); int64(n) < int64(b.N) {
				b.Fatalf("%d rows for %d first arrivals", n, b.N)
			}
		})
	}
}

func BenchmarkReplay(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		for _, tc := range []struct {
			name  string
			cache int
		}{{"cache", 0}, {"nocache", -1}} {
			b.Run(dialect+"/"+tc.name, func(b *testing.B) {
				e := newEnv(b, drivertest.Open(b, dialect), idem.Config{}, idemhttp.Config{ReplayCache: tc.cache})
				if r := post(b, e.srv, "/orders", orderBody, "k"); r.status != http.StatusCreated {
					b.Fatalf("first: %d", r.status)
				}
				run(b, e.srv, func(int64) string { return "k" }, http.StatusCreated)
				if n := countOrders(b, e.d); n != 1 {
					b.Fatalf("%d rows, want 1", n)
				}
			})
		}
	}
}

// routed puts h behind the same mux and tenant wrapper newServer uses.
func routed(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tenant := r.Header.Get("X-Tenant"); tenant != "" {
			r = r.WithContext(idemhttp.WithScope(r.Context(), tenant))
		}
		mux.ServeHTTP(w, r)
	})
}

// run posts orderBody b.N times from parallel clients, with the key keyOf
// gives the i-th request, and checks every status.
func run(b *testing.B, srv *httptest.Server, keyOf func(int64) string, status int) {
	b.Helper()
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 256
	var seq atomic.Int64
	body := []byte(orderBody)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(idemhttp.HeaderKey, keyOf(seq.Add(1)))
			res, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != status {
				b.Errorf("status %d, want %d", res.StatusCode, status)
				return
			}
		}
	})
}

// BenchmarkReplayVsNoop interleaves one request to a no-op server and one
// replay, one client at a time, so that both see the same machine load (a
// shared 2-core machine is noisy), and reports each one's mean latency and
// replay_per_noop: the replay's throughput as a fraction of the no-op's.
func BenchmarkReplayVsNoop(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		for _, tc := range []struct {
			name  string
			cache int
		}{{"cache", 0}, {"nocache", -1}} {
			b.Run(dialect+"/"+tc.name, func(b *testing.B) {
				e := newEnv(b, drivertest.Open(b, dialect), idem.Config{}, idemhttp.Config{ReplayCache: tc.cache})
				first := post(b, e.srv, "/orders", orderBody, "k")
				if first.status != http.StatusCreated {
					b.Fatalf("first: %d", first.status)
				}
				noop := httptest.NewServer(routed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Content-Length", strconv.Itoa(len(first.body)))
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write(first.body)
				})))
				defer noop.Close()
				var noopTime, replayTime time.Duration
				body := []byte(orderBody)
				once := func(srv *httptest.Server) time.Duration {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set(idemhttp.HeaderKey, "k")
					start := time.Now()
					res, err := srv.Client().Do(req)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					took := time.Since(start)
					if res.StatusCode != http.StatusCreated {
						b.Fatalf("status %d", res.StatusCode)
					}
					return took
				}
				once(noop)
				once(e.srv)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if i%2 == 0 {
						noopTime += once(noop)
						replayTime += once(e.srv)
					} else {
						replayTime += once(e.srv)
						noopTime += once(noop)
					}
				}
				b.ReportMetric(float64(noopTime.Nanoseconds())/float64(b.N), "noop-ns/req")
				b.ReportMetric(float64(replayTime.Nanoseconds())/float64(b.N), "replay-ns/req")
				b.ReportMetric(float64(noopTime)/float64(replayTime), "replay_per_noop")
			})
		}
	}
}

// BenchmarkReplayCold: every replay misses the replay cache (one entry,
// two keys taken in turn), so each one is answered from the database and
// then cached: the first replay of a key in a process, every time.
func BenchmarkReplayCold(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			e := newEnv(b, drivertest.Open(b, dialect), idem.Config{}, idemhttp.Config{ReplayCache: 1})
			for _, k := range []string{"k0", "k1"} {
				if r := post(b, e.srv, "/orders", orderBody, k); r.status != http.StatusCreated {
					b.Fatalf("first: %d", r.status)
				}
			}
			before := e.mw.CacheStats()
			run(b, e.srv, func(i int64) string { return "k" + strconv.FormatInt(i%2, 10) }, http.StatusCreated)
			st := e.mw.CacheStats()
			b.ReportMetric(float64(st.Misses-before.Misses)/float64(b.N), "misses/op")
		})
	}
}
