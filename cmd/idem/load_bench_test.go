package main

import (
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/load"
	loadrun "github.com/idemhq/idem/cmd/idem/internal/load/run"
)

// benchLoadOperations is the size of BenchmarkLoad's run: big enough that
// the verification's listings, not its fixed costs (the probes), set its
// rate.
const benchLoadOperations = 20_000

// BenchmarkLoad runs idem load's defaults (16 accounts, 20% duplicates,
// events checked) with benchLoadOperations operations against a real idem
// serve on SQLite, and reports the load phase's rate beside the
// verification's, both in operations a second:
//
//	go test -run '^$' -bench BenchmarkLoad -benchtime 1x ./cmd/idem
//
// A run with a violation fails it.
func BenchmarkLoad(b *testing.B) {
	p, _ := serveDB(b, "sqlite", nil)
	var loadSeconds, verifySeconds float64
	ops := 0
	for b.Loop() {
		r, _, err := load.Run(b.Context(), loadrun.Config{Targets: []string{p.URL},
			Operations: benchLoadOperations, Duration: 10 * time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if r.Violations != 0 || r.Unresolved != 0 {
			b.Fatalf("%d violations, %d unresolved: %v", r.Violations, r.Unresolved, r.Details)
		}
		for _, n := range r.Operations {
			ops += n
		}
		loadSeconds += r.LoadSeconds
		verifySeconds += r.VerifySeconds
	}
	b.ReportMetric(float64(ops)/loadSeconds, "load-ops/s")
	b.ReportMetric(float64(ops)/verifySeconds, "verify-ops/s")
}
