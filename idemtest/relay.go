package idemtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/outbox"
)

// The relay's failpoints, re-exported for callers of KillRelay.
const (
	// BeforePublish stops the relay after the outbox rows were committed
	// and read, before any is published.
	BeforePublish = outbox.FailpointBeforePublish
	// AfterPublish stops it after the broker acknowledged the messages,
	// before the rows are marked sent: the restarted relay publishes them
	// again, and only a stable message id lets the broker drop the copy.
	AfterPublish = outbox.FailpointAfterPublish
)

// EnvFailpoint is the variable that arms a failpoint in the relay's
// process (docs/operations.md); KillRelay sets it on the first run.
const EnvFailpoint = "IDEM_FAILPOINT"

// openDB opens the database RelayCrash.DB names: postgres://… or
// postgresql://… for PostgreSQL, sqlite:PATH or file:PATH for SQLite (the
// forms idem relay's --db takes, less its embedded default).
func openDB(ctx context.Context, dbURL string) (driver.Driver, error) {
	switch {
	case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
		return postgres.Open(ctx, postgres.Config{URL: dbURL})
	case strings.HasPrefix(dbURL, "sqlite:"), strings.HasPrefix(dbURL, "file:"):
		_, path, _ := strings.Cut(dbURL, ":")
		if path = strings.TrimPrefix(path, "//"); path != "" {
			return sqlite.Open(ctx, sqlite.Config{Path: path})
		}
	}
	// Only the scheme is named: the URL may hold a password.
	scheme, _, _ := strings.Cut(dbURL, ":")
	return nil, fmt.Errorf("a URL of scheme %q: want postgres://…, postgresql://…, sqlite:PATH or file:PATH", scheme)
}

// RelayCrash describes one crash test of a relay.
type RelayCrash struct {
	// Command returns a fresh, unstarted command that runs the relay under
	// test: the `idem relay` binary, the user's own main that calls
	// outbox.Relay.Run, or RelayCommand's re-run of the test binary. It is
	// called twice (the killed run and the restart). Required. Its Env, when
	// nil, is the test's environment; KillRelay adds IDEM_FAILPOINT.
	Command func() *exec.Cmd
	// Failpoint is where the first run is killed: BeforePublish or
	// AfterPublish. Required.
	Failpoint string
	// DB is the database URL the relay works on (postgres://…, or
	// sqlite:PATH), where KillRelay watches the outbox: the test ends when
	// the restarted relay has marked every message sent. Required.
	DB string
	// Messages returns what the broker holds (NATS's second result).
	// Required.
	Messages func() []Msg
	// Want are the ids of the messages the relay must publish, committed in
	// the outbox before KillRelay is called. Each must reach the broker
	// exactly once. Required; at most 100000.
	Want []string
	// Timeout bounds each wait: for the failpoint, and for the restarted
	// relay to publish everything. The restart needs the killed relay's
	// leases to expire, so run the relay with a short lease (idem relay
	// --relay-lease 1s). Default DefaultTimeout; bound 1s..10m.
	Timeout time.Duration
	// Settle is how long KillRelay keeps watching after every wanted id
	// arrived, so that a late duplicate is seen. Default 500ms; bound
	// 0..1m.
	Settle time.Duration
}

// KillRelay runs the second test of idem on a relay: it starts c.Command
// with the failpoint armed, waits until the process reports it, SIGKILLs
// it, restarts the relay without the failpoint, and checks that every id in
// c.Want reached the broker exactly once — none lost by the crash, none
// published twice by the restart.
func KillRelay(t TB, c RelayCrash) {
	t.Helper()
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Settle == 0 {
		c.Settle = 500 * time.Millisecond
	}
	switch {
	case c.Command == nil || c.Messages == nil || c.DB == "":
		t.Fatalf("idemtest: RelayCrash needs Command, DB and Messages")
		return
	case c.Failpoint != BeforePublish && c.Failpoint != AfterPublish:
		t.Fatalf("idemtest: RelayCrash.Failpoint %q: want %q or %q", c.Failpoint, BeforePublish, AfterPublish)
		return
	case len(c.Want) == 0 || len(c.Want) > 100000:
		t.Fatalf("idemtest: RelayCrash.Want has %d ids, want 1..100000", len(c.Want))
		return
	case c.Timeout < time.Second || c.Timeout > 10*time.Minute:
		t.Fatalf("idemtest: RelayCrash.Timeout %s is outside 1s..10m", c.Timeout)
		return
	case c.Settle < 0 || c.Settle > time.Minute:
		t.Fatalf("idemtest: RelayCrash.Settle %s is outside 0..1m", c.Settle)
		return
	}

	ctx := context.Background()
	d, err := openDB(ctx, c.DB)
	if err != nil {
		t.Fatalf("idemtest: open RelayCrash.DB: %v", err)
		return
	}
	defer d.Close()
	ob, err := outbox.New(d, outbox.Config{})
	if err != nil {
		t.Fatalf("idemtest: %v", err)
		return
	}

	first, err := startChild(c.Command(), c.Failpoint)
	if err != nil {
		t.Fatalf("idemtest: start the relay: %v", err)
		return
	}
	select {
	case <-first.hit:
	case <-first.done:
		t.Errorf("idemtest: the relay exited before reaching failpoint %s:\n%s", c.Failpoint, first.output())
		return
	case <-time.After(c.Timeout):
		first.kill()
		t.Errorf("idemtest: the relay did not reach failpoint %s within %s (is it running outbox.Relay with messages to send?):\n%s",
			c.Failpoint, c.Timeout, first.output())
		return
	}
	first.kill()

	second, err := startChild(c.Command(), "")
	if err != nil {
		t.Fatalf("idemtest: restart the relay: %v", err)
		return
	}
	defer second.stop()

	want := make(map[string]bool, len(c.Want))
	for _, id := range c.Want {
		want[id] = true
	}
	deadline := time.Now().Add(c.Timeout)
	var counts map[string]int
	for {
		// Done when the outbox holds nothing unsent: after a kill past the
		// publish the broker already has the messages, and only the
		// restarted relay's marking them sent says it has had its go.
		st, err := ob.Stats(ctx)
		if err != nil {
			t.Errorf("idemtest: outbox stats: %v", err)
			return
		}
		if st.Dead > 0 {
			t.Errorf("idemtest: %d message(s) became dead letters:\n%s", st.Dead, second.output())
			return
		}
		counts = countIDs(c.Messages())
		missing := 0
		for id := range want {
			if counts[id] == 0 {
				missing++
			}
		}
		if missing == 0 && st.Unsent == 0 {
			break
		}
		if st.Unsent == 0 && missing > 0 {
			t.Errorf("idemtest: the relay marked every message sent, but %d of %d message(s) never reached the broker with their outbox id", missing, len(want))
			return
		}
		select {
		case <-second.done:
			t.Errorf("idemtest: the restarted relay exited with %d message(s) unpublished:\n%s", missing, second.output())
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Errorf("idemtest: %d of %d message(s) never reached the broker within %s after the restart (%d unsent in the outbox): the crash lost them",
				missing, len(want), c.Timeout, st.Unsent)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(c.Settle)
	counts = countIDs(c.Messages())
	dups := 0
	var example string
	for id := range want {
		if counts[id] > 1 {
			dups++
			example = id
		}
	}
	if dups > 0 {
		t.Errorf("idemtest: %d of %d message(s) reached the broker more than once after a kill at %s (e.g. %s, %d times)",
			dups, len(want), c.Failpoint, example, counts[example])
	}
	if n := counts[""]; n > 0 {
		t.Errorf("idemtest: the broker holds %d message(s) without a message id: it cannot drop a republish", n)
	}
}

func countIDs(ms []Msg) map[string]int {
	c := make(map[string]int, len(ms))
	for _, m := range ms {
		c[m.ID]++
	}
	return c
}

// child is one relay process.
type child struct {
	cmd  *exec.Cmd
	hit  chan struct{}
	done chan struct{}
	mu   sync.Mutex
	logs strings.Builder
}

func startChild(cmd *exec.Cmd, fp string) (*child, error) {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, EnvFailpoint+"="+fp)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, hit: make(chan struct{}), done: make(chan struct{})}
	marker := "failpoint: " + fp
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		hit := false
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			if c.logs.Len() < 64<<10 {
				c.logs.WriteString(line + "\n")
			}
			c.mu.Unlock()
			if fp != "" && !hit && strings.Contains(line, marker) {
				hit = true
				close(c.hit)
			}
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.String()
}

func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// stop asks the relay to stop (SIGTERM), and kills it when it does not
// within 10s.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.kill()
	}
}

// EnvRelayChild names the variable that makes a test binary run as a relay
// child (RelayCommand, RelayMain).
const EnvRelayChild = "IDEMTEST_RELAY_CHILD"

// RelayCommand returns a RelayCrash.Command that re-runs the current test
// binary as the relay child name, with env added to the environment. The
// test binary's TestMain must call RelayMain(name, ...) before running the
// tests.
func RelayCommand(name string, env ...string) func() *exec.Cmd {
	return func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), EnvRelayChild+"="+name), env...)
		return cmd
	}
}

// RelayMain turns a test binary into relay child name when RelayCommand
// started it: it runs run with a context that ends on SIGTERM or SIGINT and
// exits the process (status 1 when run fails). Otherwise it returns at once.
// Call it first thing in TestMain. run typically opens the database named
// in an environment variable and calls outbox.Relay.Run; the failpoints
// inside outbox.Relay honour IDEM_FAILPOINT in any process.
func RelayMain(name string, run func(ctx context.Context) error) {
	if os.Getenv(EnvRelayChild) != name {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "idemtest: relay child %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// IdemRelayParams describe the `idem relay` process IdemRelay runs.
type IdemRelayParams struct {
	// Bin is the path of the idem binary. Required.
	Bin string
	// DB is the database URL (--db). Required.
	DB string
	// Publish is the broker URL (--publish), NATS's first result for one.
	// Required.
	Publish string
	// Flags are appended to the command line.
	Flags []string
}

// IdemRelay returns a RelayCrash.Command that runs `idem relay` as p
// describes, with a 1s lease and a 10ms poll so that the restart takes over
// quickly.
func IdemRelay(p IdemRelayParams) func() *exec.Cmd {
	return func() *exec.Cmd {
		args := append([]string{"relay", "--db", p.DB, "--publish", p.Publish, "--relay-lease", "1s", "--relay-poll", "10ms"}, p.Flags...)
		cmd := exec.Command(p.Bin, args...)
		// The binary's own files (an embedded NATS when --publish is empty)
		// stay out of the caller's directory.
		cmd.Dir = os.TempDir()
		return cmd
	}
}
