package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// ChaosConfig configures a Supervisor. Each field's comment states its
// default and bound.
type ChaosConfig struct {
	// Bin is the idem executable to run as `Bin serve`. Default: this
	// process's own executable.
	Bin string
	// DB is passed to serve as --db. Required: the servers share it, so
	// PostgreSQL is the database to use (SQLite allows one server only).
	DB string
	// Servers is how many serve processes run at once. Default 2 (one is
	// always up while the other restarts); bound 1..8.
	Servers int
	// KillEvery is the mean interval between SIGKILLs, jittered ±50%.
	// Default 3s; bound 100ms..1h.
	KillEvery time.Duration
	// Env is added to the servers' environment.
	Env []string
	// Args are added to every server's command line after `serve --addr
	// … --db …` (for example --config FILE, which configures the webhook
	// endpoints a run delivers to). Paths in them must be absolute: each
	// server runs in a directory of its own. Default none; at most 64.
	Args []string
	// Log receives the supervisor's own lines (nil: none), from a
	// goroutine of its own.
	Log io.Writer
	// StartTimeout bounds one server's start. Default 60s; bound 1s..10m.
	StartTimeout time.Duration
	// Seed seeds the kill schedule; 0 draws one from the clock.
	Seed int64
}

func (c ChaosConfig) withDefaults() (ChaosConfig, error) {
	if c.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("load: chaos: find own executable: %w", err)
		}
		c.Bin = exe
	}
	if c.Servers == 0 {
		c.Servers = 2
	}
	if c.KillEvery == 0 {
		c.KillEvery = 3 * time.Second
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	return c, nil
}

func (c ChaosConfig) validate() error {
	switch {
	case c.DB == "":
		return errors.New("load: chaos needs --db, the database the servers share (postgres://…)")
	case c.Servers < 1 || c.Servers > 8:
		return fmt.Errorf("load: chaos servers %d is outside 1..8", c.Servers)
	case c.Servers > 1 && !strings.HasPrefix(c.DB, "postgres"):
		return errors.New("load: chaos with several servers needs a postgres:// database; use --servers 1 for SQLite")
	case c.KillEvery < 100*time.Millisecond || c.KillEvery > time.Hour:
		return fmt.Errorf("load: kill interval %s is outside 100ms..1h", c.KillEvery)
	case c.StartTimeout < time.Second || c.StartTimeout > 10*time.Minute:
		return fmt.Errorf("load: start timeout %s is outside 1s..10m", c.StartTimeout)
	case len(c.Args) > 64:
		return fmt.Errorf("load: chaos: %d extra serve arguments; at most 64", len(c.Args))
	}
	return nil
}

// Supervisor runs idem serve processes for a chaos run, SIGKILLs one at
// random intervals and starts it again, keeping Pool to the servers that
// are up.
type Supervisor struct {
	cfg  ChaosConfig
	pool *Pool
	rnd  *rand.Rand

	// dir holds one working directory per launch, so each server's
	// embedded broker has a data directory of its own.
	dir      string
	launches int

	mu      sync.Mutex
	servers []*server
	kills   int

	stop chan struct{}
	done chan struct{}
}

// server is one running serve process.
type server struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
	mu     sync.Mutex
	tail   []string // the last lines of its stderr, for diagnostics
}

// servingRE finds the listen address in serve's start-up log line.
var servingRE = regexp.MustCompile(`msg="idem serving" addr=(\S+)`)

// StartChaos starts the servers (one after another, so migrations do not
// race) and returns once all serve.
func StartChaos(ctx context.Context, cfg ChaosConfig) (*Supervisor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-chaos-")
	if err != nil {
		return nil, fmt.Errorf("load: chaos: %w", err)
	}
	s := &Supervisor{cfg: cfg, pool: NewPool(), rnd: rand.New(rand.NewPCG(uint64(cfg.Seed), 13)), dir: dir}
	for range cfg.Servers {
		srv, err := s.launch(ctx)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.mu.Lock()
		s.servers = append(s.servers, srv)
		s.mu.Unlock()
		s.pool.Add(srv.url)
	}
	return s, nil
}

// Pool is the live servers.
func (s *Supervisor) Pool() *Pool { return s.pool }

// Kills is how many SIGKILLs were sent.
func (s *Supervisor) Kills() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kills
}

func (s *Supervisor) logf(format string, args ...any) {
	if s.cfg.Log != nil {
		fmt.Fprintf(s.cfg.Log, "load: chaos: "+format+"\n", args...)
	}
}

// launch starts one server on a free loopback port and waits until it serves.
func (s *Supervisor) launch(ctx context.Context) (*server, error) {
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", s.cfg.DB, "--log-format", "text"}, s.cfg.Args...)
	cmd := exec.Command(s.cfg.Bin, args...)
	cmd.Env = append(os.Environ(), s.cfg.Env...)
	s.mu.Lock()
	s.launches++
	cmd.Dir = filepath.Join(s.dir, fmt.Sprintf("server-%d", s.launches))
	s.mu.Unlock()
	if err := os.MkdirAll(cmd.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("load: chaos: %w", err)
	}
	setDeathSignal(cmd)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("load: chaos: start %s serve: %w", s.cfg.Bin, err)
	}
	srv := &server{cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			srv.mu.Lock()
			srv.tail = append(srv.tail, line)
			if len(srv.tail) > 20 {
				srv.tail = srv.tail[1:]
			}
			srv.mu.Unlock()
			if m := servingRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
		_ = cmd.Wait()
		close(srv.exited)
	}()
	timer := time.NewTimer(s.cfg.StartTimeout)
	defer timer.Stop()
	select {
	case a := <-addr:
		srv.url = "http://" + a
		return srv, nil
	case <-srv.exited:
		return nil, fmt.Errorf("load: chaos: serve exited at start:\n%s", srv.lastLines())
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	<-srv.exited
	return nil, fmt.Errorf("load: chaos: serve did not start within %s:\n%s", s.cfg.StartTimeout, srv.lastLines())
}

func (srv *server) lastLines() string {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return strings.Join(srv.tail, "\n")
}

// Run kills and restarts servers until ctx ends or Calm is called.
func (s *Supervisor) Run(ctx context.Context) {
	s.mu.Lock()
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	stop, done := s.stop, s.done
	s.mu.Unlock()
	go func() {
		defer close(done)
		for {
			d := time.Duration(float64(s.cfg.KillEvery) * (0.5 + s.rnd.Float64()))
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case <-time.After(d):
			}
			if err := s.killOne(ctx); err != nil {
				s.logf("%v", err)
				return
			}
		}
	}()
}

// killOne SIGKILLs a random server and starts a new one in its place. The
// server leaves the pool first, so new requests go to the others, while
// the requests it is serving die with it — mid-transaction, or committed
// with the answer lost: the cases a client's retry must survive.
func (s *Supervisor) killOne(ctx context.Context) error {
	s.mu.Lock()
	i := s.rnd.IntN(len(s.servers))
	victim := s.servers[i]
	s.kills++
	n := s.kills
	s.mu.Unlock()

	s.pool.Remove(victim.url)
	_ = victim.cmd.Process.Kill()
	<-victim.exited
	s.logf("SIGKILL %d: %s", n, victim.url)
	next, err := s.launch(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.servers[i] = next
	s.mu.Unlock()
	s.pool.Add(next.url)
	return nil
}

// Calm stops the killing and waits for a restart in progress to finish, so
// the verifier sees every server up.
func (s *Supervisor) Calm() {
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// Close stops the killing and ends every server (SIGTERM, then SIGKILL
// after a few seconds).
func (s *Supervisor) Close() {
	s.Calm()
	s.mu.Lock()
	servers := s.servers
	s.servers = nil
	s.mu.Unlock()
	for _, srv := range servers {
		_ = srv.cmd.Process.Signal(terminate)
	}
	for _, srv := range servers {
		select {
		case <-srv.exited:
		case <-time.After(5 * time.Second):
			_ = srv.cmd.Process.Kill()
			<-srv.exited
		}
	}
	_ = os.RemoveAll(s.dir)
}
