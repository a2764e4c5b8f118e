package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/testpg"
)

// BenchmarkKeeperFirstArrivalStdSQL: BenchmarkKeeperFirstArrival's
// requests on PostgreSQL through pgx's pool and through a *sql.DB on pgx's
// stdlib (postgres.Config.DB), side by side in one run, for the ratio
// docs/benchmarks.md gives.
func BenchmarkKeeperFirstArrivalStdSQL(b *testing.B) {
	for _, path := range []string{"pgx", "database-sql"} {
		b.Run(path, func(b *testing.B) {
			ctx := context.Background()
			cfg := postgres.Config{URL: testpg.URL(b), SearchPath: testpg.Schema(b), MaxConns: benchClients}
			if path == "database-sql" {
				db, err := sql.Open("pgx", cfg.URL+"&search_path="+cfg.SearchPath)
				if err != nil {
					b.Fatal(err)
				}
				db.SetMaxOpenConns(benchClients)
				db.SetMaxIdleConns(benchClients)
				b.Cleanup(func() { db.Close() })
				cfg = postgres.Config{DB: db}
			}
			d, err := postgres.Open(ctx, cfg)
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
			k, err := idem.New(d, idem.Config{})
			if err != nil {
				b.Fatal(err)
			}
			var seq atomic.Int64
			b.SetParallelism(benchClients / max(1, testingProcs()))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprintf("first-%d", seq.Add(1))
					if _, err := k.Do(ctx, req(key, `{"amount":1250}`), benchWork); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
