package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) {
	if os.Getenv(clientHelperEnv) != "" {
		os.Exit(clientHelper())
	}
	code := testpg.Main(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	binDir    string
	buildErr  error
)

// binary builds the idem binary once per test run (with the race detector
// when the tests have it, so the processes are checked too).
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "idem-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "idem")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a running idem process.
type proc struct {
	t       testing.TB
	cmd     *exec.Cmd
	URL     string // http://host:port
	mu      sync.Mutex
	stderr  bytes.Buffer
	exited  chan struct{}
	waitErr error
}

// servingRE finds the listen address in serve's start-up log line.
var servingRE = regexp.MustCompile(`msg="idem serving" addr=(\S+)`)

// start runs `idem args...` with env added to this process's environment
// and, for serve, waits until it listens. The process is killed when t ends.
func start(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	return launch(t, len(args) > 0 && args[0] == "serve", env, args...)
}

// launch runs `idem args...`; with waitServing it waits for serve to listen.
func launch(t testing.TB, waitServing bool, env []string, args ...string) *proc {
	t.Helper()
	return launchBinary(t, binary(t), waitServing, env, args...)
}

// launchBinary is launch with another idem binary (an older release).
func launchBinary(t testing.TB, bin string, waitServing bool, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Dir = t.TempDir()
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if m := servingRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("idem %s stderr:\n%s", strings.Join(args, " "), p.Stderr())
		}
	})
	if waitServing {
		select {
		case a := <-addr:
			p.URL = "http://" + a
		case <-p.exited:
			t.Fatalf("idem serve exited: %v\n%s", p.waitErr, p.Stderr())
		case <-time.After(60 * time.Second):
			t.Fatalf("idem serve did not start\n%s", p.Stderr())
		}
	}
	return p
}

func (p *proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// wait returns the process's exit error once it has exited.
func (p *proc) wait(timeout time.Duration) error {
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(timeout):
		p.t.Fatalf("process did not exit within %s", timeout)
		return nil
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// serveDB starts idem serve on a fresh database of the dialect, on a free
// loopback port, and returns the process and the --db value it uses.
func serveDB(t testing.TB, dialect string, env []string, extra ...string) (*proc, string) {
	t.Helper()
	db := dbURL(t, dialect)
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db}, extra...)
	return start(t, env, args...), db
}

func dbURL(t testing.TB, dialect string) string {
	t.Helper()
	if dialect == "postgres" {
		return drivertest.PostgresURL(t)
	}
	return "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
}

// response is one HTTP exchange's answer.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q: %v", r.Body, err)
	}
	return m
}

// code is the problem+json code member of an error answer.
func (r response) code(t testing.TB) string {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("status %d with Content-Type %q, want application/problem+json: %s", r.Status, ct, r.Body)
	}
	c, _ := r.json(t)["code"].(string)
	return c
}

var client = &http.Client{Timeout: 30 * time.Second}

// call sends one request. key "" sends no Idempotency-Key; header pairs
// follow as name, value.
func call(t testing.TB, method, url, key string, body any, header ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// mustStatus fails t unless r has the status.
func mustStatus(t testing.TB, r response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
}
