package idem_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/sealtest"
	"github.com/idemhq/idem/seal"
)

// sealedModes are the two halves of the encryption benchmarks, run side by
// side: off (no Sealer) and on (AES-256-GCM per record, sealtest's).
var sealedModes = []struct {
	name   string
	sealer func() seal.Sealer
}{
	{"off", func() seal.Sealer { return nil }},
	{"on", func() seal.Sealer { return sealtest.New() }},
}

// BenchmarkSealedFirstArrival is BenchmarkKeeperFirstArrival with the
// outcome sealed (on) or not (off): the cost of encryption at rest on a
// first arrival is on's ops/s over off's.
func BenchmarkSealedFirstArrival(b *testing.B) {
	for _, dialect := range []string{"postgres", "sqlite"} {
		for _, mode := range sealedModes {
			b.Run(dialect+"/"+mode.name, func(b *testing.B) {
				k, err := idem.New(benchDriver(b, dialect), idem.Config{Sealer: mode.sealer()})
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
}

// BenchmarkSealedReplay is BenchmarkKeeperReplay with the stored outcomes
// sealed (on) or not (off): each replay opens its record.
func BenchmarkSealedReplay(b *testing.B) {
	for _, dialect := range []string{"postgres", "sqlite"} {
		for _, mode := range sealedModes {
			b.Run(dialect+"/"+mode.name, func(b *testing.B) {
				k, err := idem.New(benchDriver(b, dialect), idem.Config{Sealer: mode.sealer()})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				const keys = 1000
				for i := range keys {
					if _, err := k.Do(ctx, req(fmt.Sprintf("replay-%d", i), `{"amount":1250}`), benchWork); err != nil {
						b.Fatal(err)
					}
				}
				var seq atomic.Int64
				b.SetParallelism(benchClients / max(1, testingProcs()))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := fmt.Sprintf("replay-%d", seq.Add(1)%keys)
						res, err := k.Do(ctx, req(key, `{"amount":1250}`), benchWork)
						if err != nil || !res.Replayed {
							b.Errorf("replay: %v replayed=%v", err, res.Replayed)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
		}
	}
}
