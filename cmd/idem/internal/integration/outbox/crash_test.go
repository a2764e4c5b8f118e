package outbox_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/failpoint"
	"github.com/idemhq/idem/outbox"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// idemBinary builds cmd/idem once per test run.
func idemBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idem-crash-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "idem")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/idemhq/idem/cmd/idem").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is one idem relay process.
type proc struct {
	cmd  *exec.Cmd
	hit  chan string // failpoints reached
	done chan struct{}
	mu   sync.Mutex
	logs strings.Builder
}

func startRelay(t *testing.T, dbURL, natsURL, fp string) *proc {
	t.Helper()
	cmd := exec.Command(idemBinary(t), "relay", "--db", dbURL, "--publish", natsURL,
		"--relay-lease", "1s", "--relay-poll", "10ms", "--relay-batch", "50")
	cmd.Env = append(os.Environ(), failpoint.Env+"="+fp)
	cmd.Dir = t.TempDir()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, hit: make(chan string, 1), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if name, ok := strings.CutPrefix(line, "failpoint: "); ok {
				select {
				case p.hit <- name:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) waitFailpoint(t *testing.T, name string) {
	t.Helper()
	select {
	case got := <-p.hit:
		if got != name {
			t.Fatalf("process stopped at %s, want %s", got, name)
		}
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("relay exited before %s:\n%s", name, p.logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("relay never reached %s", name)
	}
}

// crashEnv is a Postgres schema and a NATS server on loopback that child
// processes reach.
func crashEnv(t *testing.T) (string, driver.Driver, *stream) {
	t.Helper()
	dbURL, d := crashDB(t)
	return dbURL, d, newStream(t, "127.0.0.1:0")
}

// crashDB is a migrated Postgres schema that child processes reach.
func crashDB(t *testing.T) (string, driver.Driver) {
	t.Helper()
	dbURL := drivertest.PostgresURL(t)
	d, err := postgres.Open(context.Background(), postgres.Config{URL: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dbURL, d
}

// Killed at a failpoint, the relay is restarted: the message is in the
// stream exactly once and its row is marked sent.
func TestCrashAtFailpoint(t *testing.T) {
	for _, fp := range []string{outbox.FailpointBeforePublish, outbox.FailpointAfterPublish} {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			dbURL, d, st := crashEnv(t)
			ob := newOutbox(t, d)
			m := msg("k", 1)
			enqueue(t, d, ob, m)

			p := startRelay(t, dbURL, st.srv.ClientURL(), fp)
			p.waitFailpoint(t, fp)
			p.kill()
			copies := countByID(st.messages(t))[m.ID]
			if fp == outbox.FailpointBeforePublish && copies != 0 {
				t.Fatalf("before publish: stream already holds %d copies", copies)
			}
			if fp == outbox.FailpointAfterPublish && copies != 1 {
				t.Fatalf("after publish: stream holds %d copies, want 1", copies)
			}
			if n := unsent(t, d); n != 1 {
				t.Fatalf("killed relay left %d unsent rows, want 1", n)
			}

			startRelay(t, dbURL, st.srv.ClientURL(), "")
			waitDrained(t, d)
			if got := countByID(st.messages(t)); len(got) != 1 || got[m.ID] != 1 {
				t.Fatalf("stream holds %v, want exactly one copy of %s", got, m.ID)
			}
		})
	}
}

// Two relay processes, killed at random moments while messages are being
// enqueued: every message is in the stream exactly once, none is missing,
// and each key's messages are in enqueue order. IDEM_CRASH_MESSAGES raises
// the message count (default 300).
func TestCrashRandomKills(t *testing.T) {
	t.Parallel()
	n := 300
	if s := os.Getenv("IDEM_CRASH_MESSAGES"); s != "" {
		fmt.Sscanf(s, "%d", &n)
	}
	dbURL, d, st := crashEnv(t)
	ob := newOutbox(t, d)
	url := st.srv.ClientURL()
	relays := []*proc{startRelay(t, dbURL, url, ""), startRelay(t, dbURL, url, "")}

	want := map[string][]string{}
	stop := make(chan struct{})
	killerDone := make(chan int)
	go func() {
		kills := 0
		for {
			select {
			case <-stop:
				killerDone <- kills
				return
			case <-time.After(time.Duration(150+rand.IntN(350)) * time.Millisecond):
			}
			i := rand.IntN(len(relays))
			relays[i].kill()
			kills++
			relays[i] = startRelay(t, dbURL, url, "")
		}
	}()
	for i := 0; i < n; i += 10 {
		var batch []outbox.Message
		for j := i; j < min(i+10, n); j++ {
			k := fmt.Sprintf("k%d", j%13)
			m := msg(k, j)
			want[k] = append(want[k], m.ID)
			batch = append(batch, m)
		}
		enqueue(t, d, ob, batch...)
		// Spread the enqueues over about 3s, so that kills land among them.
		time.Sleep(max(time.Millisecond, 3*time.Second/time.Duration(n/10+1)))
	}
	close(stop)
	kills := <-killerDone
	waitDrained(t, d)

	msgs := st.messages(t)
	got := countByID(msgs)
	if len(got) != n {
		t.Fatalf("stream holds %d distinct ids, want %d", len(got), n)
	}
	for id, c := range got {
		if c != 1 {
			t.Fatalf("id %s in stream %d times", id, c)
		}
	}
	byKey := map[string][]string{}
	for _, m := range msgs {
		byKey[m.Key] = append(byKey[m.Key], m.ID)
	}
	for k, ids := range want {
		if fmt.Sprint(byKey[k]) != fmt.Sprint(ids) {
			t.Fatalf("key %s out of order in the stream", k)
		}
	}
	t.Logf("%d messages, %d kills", n, kills)
}
