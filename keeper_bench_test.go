package idem_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/internal/testpg"
)

// benchClients is the number of concurrent callers; bench/run gives pgbench
// the same number of clients so the two figures compare.
const benchClients = 16

func benchDriver(b *testing.B, dialect string) driver.Driver {
	b.Helper()
	ctx := context.Background()
	var d driver.Driver
	var err error
	if dialect == "postgres" {
		d, err = postgres.Open(ctx, postgres.Config{URL: testpg.URL(b), SearchPath: testpg.Schema(b), MaxConns: benchClients})
	} else {
		d, err = sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(b.TempDir(), "idem.db")})
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sqlBizTable); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	return d
}

// benchWork is the work bench/run's pgbench script does too: one business
// row, and an outcome of a typical size.
func benchWork(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ($1, $2)`, "bench", "one side effect"); err != nil {
		return idem.Outcome{}, err
	}
	return idem.Outcome{Status: 201, Body: benchBody}, nil
}

var benchBody = []byte(`{"id":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"posted","amount":1250,"currency":"EUR"}`)

// BenchmarkKeeperFirstArrival: every request has a new key, so each claims,
// works and stores in one transaction.
func BenchmarkKeeperFirstArrival(b *testing.B) {
	for _, dialect := range []string{"postgres", "sqlite"} {
		b.Run(dialect, func(b *testing.B) {
			k, err := idem.New(benchDriver(b, dialect), idem.Config{})
			if err != nil {
				b.Fatal(err)
			}
			var seq atomic.Int64
			b.SetParallelism(benchClients / max(1, testingProcs()))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprintf("first-%d", seq.Add(1))
					if _, err := k.Do(context.Background(), req(key, `{"amount":1250}`), benchWork); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// BenchmarkKeeperReplay: every request repeats one of 1000 completed keys,
// answered by the fast path's read. reads/trip is how many reads shared a
// round trip, on average (read.go).
func BenchmarkKeeperReplay(b *testing.B) {
	for _, dialect := range []string{"postgres", "sqlite"} {
		b.Run(dialect, func(b *testing.B) {
			k, err := idem.New(benchDriver(b, dialect), idem.Config{})
			if err != nil {
				b.Fatal(err)
			}
			var trips, reads atomic.Int64
			idem.SetReadHooks(k, nil, func(keys []idem.Key) {
				trips.Add(1)
				reads.Add(int64(len(keys)))
			})
			ctx := context.Background()
			const keys = 1000
			for i := range keys {
				if _, err := k.Do(ctx, req(fmt.Sprintf("replay-%d", i), `{"amount":1250}`), benchWork); err != nil {
					b.Fatal(err)
				}
			}
			var seq atomic.Int64
			b.SetParallelism(benchClients / max(1, testingProcs()))
			trips.Store(0)
			reads.Store(0)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprintf("replay-%d", seq.Add(1)%keys)
					res, err := k.Do(ctx, req(key, `{"amount":1250}`), benchWork)
					if err != nil || !res.Replayed {
						b.Errorf("replay: %v %v", err, res.Replayed)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric(float64(reads.Load())/float64(max(1, trips.Load())), "reads/trip")
		})
	}
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkBatcherFirstArrival: BenchmarkKeeperFirstArrival's requests and
// clients through a Batcher, so that the first arrivals of the moment share
// a transaction. The work makes the same business row per request, with
// one statement per batch, as set-based work does. reqs/tx is the mean
// batch size the load formed.
func BenchmarkBatcherFirstArrival(b *testing.B) {
	for _, dialect := range []string{"postgres", "sqlite"} {
		b.Run(dialect, func(b *testing.B) {
			k, err := idem.New(benchDriver(b, dialect), idem.Config{})
			if err != nil {
				b.Fatal(err)
			}
			benchBatcher(b, k, benchClients)
		})
	}
}

// BenchmarkFirstArrivalCrowd: four times the clients of the benchmarks
// above on the same pool of 16 connections, as when a service's requests
// outnumber its connections: Keeper.Do's requests queue for a connection,
// a Batcher's for a batch.
func BenchmarkFirstArrivalCrowd(b *testing.B) {
	const clients = 4 * benchClients
	for _, name := range []string{"keeper", "batcher"} {
		b.Run("postgres/"+name, func(b *testing.B) {
			k, err := idem.New(benchDriver(b, "postgres"), idem.Config{})
			if err != nil {
				b.Fatal(err)
			}
			if name == "batcher" {
				benchBatcher(b, k, clients)
				return
			}
			var seq atomic.Int64
			b.SetParallelism(clients / max(1, testingProcs()))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprintf("first-%d", seq.Add(1))
					if _, err := k.Do(context.Background(), req(key, `{"amount":1250}`), benchWork); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

// benchBatcher sends first arrivals from clients parallel callers through
// a Batcher on k with the default BatchConfig.
func benchBatcher(b *testing.B, k *idem.Keeper, clients int) {
	bt, err := idem.NewBatcher(k, benchBatchWork, idem.BatchConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer bt.Close(context.Background()) //nolint:errcheck // no deadline: it waits
	var txs atomic.Int64
	idem.SetBatchHook(bt, func([]idem.Key) { txs.Add(1) })
	var seq atomic.Int64
	b.SetParallelism(clients / max(1, testingProcs()))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprintf("first-%d", seq.Add(1))
			if _, err := bt.Do(context.Background(), req(key, `{"amount":1250}`), struct{}{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(b.N)/float64(max(1, txs.Load())), "reqs/tx")
}

// benchBatchWork is benchWork for a batch: a business row per item, all in
// one statement (benchWork's own for one item).
func benchBatchWork(ctx context.Context, tx driver.Tx, items []struct{}) ([]idem.ItemResult, error) {
	if len(items) == 1 {
		if _, err := benchWork(ctx, tx); err != nil {
			return nil, err
		}
	} else if _, err := tx.Exec(ctx, sqlBenchRows, len(items)); err != nil {
		return nil, err
	}
	out := make([]idem.ItemResult, len(items))
	for i := range out {
		out[i].Outcome = idem.Outcome{Status: 201, Body: benchBody}
	}
	return out, nil
}

// sqlBenchRows inserts $1 rows of benchWork's in one statement, on either
// dialect.
const sqlBenchRows = `
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)
INSERT INTO biz (k, note) SELECT 'bench', 'one side effect' FROM n`
