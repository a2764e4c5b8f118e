// Package leakcheck is the goroutine-leak check every test package runs
// from its TestMain once its tests have passed: a goroutine still running
// after the last test is work a Close or a cancel failed to stop, which in
// a service is a leak that grows with every request.
//
//	func TestMain(m *testing.M) { os.Exit(testpg.Main(leakcheck.Wrap(m))) }
//
// or, when TestMain has more to do around the run:
//
//	code := m.Run()
//	stopServers()
//	os.Exit(leakcheck.After(code))
package leakcheck

import (
	"fmt"
	"os"

	"go.uber.org/goleak"
)

// Runner is what testing.M and the wrappers of the test servers' Main
// functions have in common.
type Runner interface{ Run() int }

// Wrap returns m whose Run also checks for leaked goroutines (After).
func Wrap(m Runner, opts ...goleak.Option) Runner { return wrapped{m, opts} }

type wrapped struct {
	m    Runner
	opts []goleak.Option
}

func (w wrapped) Run() int { return After(w.m.Run(), w.opts...) }

// After returns code, the status of a test run, or 1 when the run passed
// (code 0) but goroutines other than opts allow are still running; it
// prints them. A failed run is left as it is: its leaks are the failure's
// echo, not news.
func After(code int, opts ...goleak.Option) int {
	if code != 0 {
		return code
	}
	if err := goleak.Find(opts...); err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		return 1
	}
	return 0
}
