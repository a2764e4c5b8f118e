// Package chaos runs the faults of a chaos load run: idem serve processes
// it SIGKILLs and starts again (the Supervisor, whose Pool the load's
// clients send to), restarts of the database they share, and a three-node
// NATS cluster they publish to whose nodes it shuts down in turn. The load
// itself and its verification are package load's.
package chaos

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/load/run"
)

// Config configures a Supervisor. Each field's comment states its
// default and bound.
type Config struct {
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
	// Kills, when above 0, is how many SIGKILLs the run makes: the
	// schedule stops after that many, each server killed started again.
	// Default 0: no limit; bound 0..1000.
	Kills int
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

	// DBRestart, when set, is a shell command (run with sh -c) that
	// restarts the database the servers share — for example "pg_ctl -D DIR
	// restart -m immediate", "scripts/pg restart DIR" or "docker restart
	// pg" — run at random intervals while the load runs. The servers answer
	// 503 while it is down and the clients retry. Default none; at most
	// 4096 bytes.
	DBRestart string
	// DBEvery is the mean interval between database restarts, jittered
	// ±50%. Default 20s; bound 1s..1h.
	DBEvery time.Duration
	// DBTimeout bounds one run of DBRestart or Failover; a command still
	// running then is killed and the run goes on. Default 60s; bound
	// 1s..10m.
	DBTimeout time.Duration
	// Failover, when set, is a shell command (sh -c) that fails the
	// database over to a standby — "patronictl failover --force", an RDS
	// reboot with failover, a script that kills the primary and promotes
	// its standby — run at random intervals of its own. The servers must
	// reach the database through a URL that follows the primary (a
	// multi-host URL with target_session_attrs=read-write, a DNS name the
	// failover moves). Default none; at most 4096 bytes.
	Failover string
	// FailoverEvery is the mean interval between failovers, jittered ±50%.
	// Default 60s; bound 1s..1h.
	FailoverEvery time.Duration
	// Failovers, when above 0, is how many failovers the run makes: the
	// schedule stops after that many have completed. Default 0: no
	// limit; bound 0..1000.
	Failovers int

	// NATS runs a three-node JetStream cluster inside this process, points
	// every server at it (serve --publish nats://…?replicas=3), and shuts
	// one node down at random intervals, never two at once. Default false.
	NATS bool
	// NATSEvery is the mean interval between NATS node shutdowns, jittered
	// ±50%. Default 10s; bound 1s..1h.
	NATSEvery time.Duration
	// NATSDown is how long a node stays down before it starts again on its
	// ports with its store directory. Default 3s; bound 100ms..1m.
	NATSDown time.Duration
}

func (c Config) withDefaults() (Config, error) {
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
	if c.DBEvery == 0 {
		c.DBEvery = 20 * time.Second
	}
	if c.FailoverEvery == 0 {
		c.FailoverEvery = time.Minute
	}
	if c.DBTimeout == 0 {
		c.DBTimeout = 60 * time.Second
	}
	if c.NATSEvery == 0 {
		c.NATSEvery = 10 * time.Second
	}
	if c.NATSDown == 0 {
		c.NATSDown = 3 * time.Second
	}
	return c, nil
}

func (c Config) validate() error {
	switch {
	case c.DB == "":
		return errors.New("load: chaos needs --db, the database the servers share (postgres://…)")
	case c.Servers < 1 || c.Servers > 8:
		return fmt.Errorf("load: chaos servers %d is outside 1..8", c.Servers)
	case c.Servers > 1 && !strings.HasPrefix(c.DB, "postgres"):
		return errors.New("load: chaos with several servers needs a postgres:// database; use --servers 1 for SQLite")
	case c.KillEvery < 100*time.Millisecond || c.KillEvery > time.Hour:
		return fmt.Errorf("load: kill interval %s is outside 100ms..1h", c.KillEvery)
	case c.Kills < 0 || c.Kills > 1000:
		return fmt.Errorf("load: chaos kills %d is outside 0..1000", c.Kills)
	case c.StartTimeout < time.Second || c.StartTimeout > 10*time.Minute:
		return fmt.Errorf("load: start timeout %s is outside 1s..10m", c.StartTimeout)
	case len(c.Args) > 64:
		return fmt.Errorf("load: chaos: %d extra serve arguments; at most 64", len(c.Args))
	case len(c.DBRestart) > 4096:
		return fmt.Errorf("load: chaos: database restart command of %d bytes; at most 4096", len(c.DBRestart))
	case len(c.Failover) > 4096:
		return fmt.Errorf("load: chaos: failover command of %d bytes; at most 4096", len(c.Failover))
	case c.Failovers < 0 || c.Failovers > 1000:
		return fmt.Errorf("load: chaos failovers %d is outside 0..1000", c.Failovers)
	case c.FailoverEvery < time.Second || c.FailoverEvery > time.Hour:
		return fmt.Errorf("load: failover interval %s is outside 1s..1h", c.FailoverEvery)
	case c.DBEvery < time.Second || c.DBEvery > time.Hour:
		return fmt.Errorf("load: database restart interval %s is outside 1s..1h", c.DBEvery)
	case c.DBTimeout < time.Second || c.DBTimeout > 10*time.Minute:
		return fmt.Errorf("load: database restart timeout %s is outside 1s..10m", c.DBTimeout)
	case c.NATSEvery < time.Second || c.NATSEvery > time.Hour:
		return fmt.Errorf("load: NATS node kill interval %s is outside 1s..1h", c.NATSEvery)
	case c.NATSDown < 100*time.Millisecond || c.NATSDown > time.Minute:
		return fmt.Errorf("load: NATS node downtime %s is outside 100ms..1m", c.NATSDown)
	}
	return nil
}

// Supervisor runs idem serve processes for a chaos run, SIGKILLs one at
// random intervals and starts it again, keeping Pool to the servers that
// are up. With Config.DBRestart it also restarts the database, and
// with Config.NATS it runs the servers' NATS cluster and shuts its
// nodes down, each fault on a schedule of its own.
type Supervisor struct {
	cfg  Config
	pool *run.Pool
	rnd  *rand.Rand // the SIGKILL schedule's, used by its goroutine only

	// nats is the cluster the servers publish to (nil without cfg.NATS).
	nats *natsCluster

	// dir holds one working directory per launch, so each server's
	// embedded broker has a data directory of its own.
	dir      string
	launches int

	mu         sync.Mutex
	servers    []*server
	kills      int
	restarted  int // the killed servers started again and back in the pool
	dbRestarts int
	failovers  int
	natsKills  int
	faults     []run.FaultWindow // the database commands that completed

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

// Start starts the servers (one after another, so migrations do not
// race) and returns once all serve.
func Start(ctx context.Context, cfg Config) (*Supervisor, error) {
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
	s := &Supervisor{cfg: cfg, pool: run.NewPool(), rnd: rand.New(rand.NewPCG(uint64(cfg.Seed), 13)), dir: dir}
	if cfg.NATS {
		s.nats, err = startNATSCluster(ctx, dir, cfg.StartTimeout)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		// After cfg.Args, so that it wins over a --publish there.
		s.cfg.Args = append(slices.Clone(cfg.Args), "--publish", s.nats.URL()+"?replicas="+strconv.Itoa(natsNodes))
		s.logf("NATS cluster of %d nodes at %s", natsNodes, s.nats.URL())
	}
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
func (s *Supervisor) Pool() *run.Pool { return s.pool }

// Kills is how many SIGKILLs were sent.
func (s *Supervisor) Kills() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kills
}

// Restarted is how many SIGKILLed servers were started again and are
// back in the pool: the kills that completed.
func (s *Supervisor) Restarted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarted
}

// Failovers is how many failover commands completed.
func (s *Supervisor) Failovers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failovers
}

// DBRestarts is how many database restarts completed.
func (s *Supervisor) DBRestarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dbRestarts
}

// Faults is the database restarts and failovers that completed, with
// when their commands ran, for the report's figures.
func (s *Supervisor) Faults() []run.FaultWindow {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.faults)
}

// NATSKills is how many times a NATS node was shut down.
func (s *Supervisor) NATSKills() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.natsKills
}

// NATSURL is the NATS cluster's client URLs, comma-separated (the form
// Config.NATS takes); "" without Config.NATS.
func (s *Supervisor) NATSURL() string {
	if s.nats == nil {
		return ""
	}
	return s.nats.URL()
}

func (s *Supervisor) logf(format string, args ...any) {
	if s.cfg.Log != nil {
		fmt.Fprintf(s.cfg.Log, "load: chaos: "+format+"\n", args...)
	}
}

// launch starts one server on a free loopback port and waits until it
// serves. A server that exits at start (its database restarting, say) is
// started again until StartTimeout has passed.
func (s *Supervisor) launch(ctx context.Context) (*server, error) {
	deadline := time.Now().Add(s.cfg.StartTimeout)
	for attempt := 1; ; attempt++ {
		srv, exited, err := s.launchOnce(ctx, deadline)
		if err == nil || !exited || time.Until(deadline) < time.Second || ctx.Err() != nil {
			return srv, err
		}
		s.logf("serve exited at start (attempt %d), starting it again: %s", attempt, lastLine(err.Error()))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// launchOnce starts one serve process and waits until it serves, exits
// (exited), or deadline passes.
func (s *Supervisor) launchOnce(ctx context.Context, deadline time.Time) (srv *server, exited bool, err error) {
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", s.cfg.DB, "--log-format", "text"}, s.cfg.Args...)
	cmd := exec.Command(s.cfg.Bin, args...)
	cmd.Env = append(os.Environ(), s.cfg.Env...)
	s.mu.Lock()
	s.launches++
	cmd.Dir = filepath.Join(s.dir, fmt.Sprintf("server-%d", s.launches))
	s.mu.Unlock()
	if err := os.MkdirAll(cmd.Dir, 0o750); err != nil {
		return nil, false, fmt.Errorf("load: chaos: %w", err)
	}
	setDeathSignal(cmd)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, false, err
	}
	if err := cmd.Start(); err != nil {
		return nil, false, fmt.Errorf("load: chaos: start %s serve: %w", s.cfg.Bin, err)
	}
	srv = &server{cmd: cmd, exited: make(chan struct{})}
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
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case a := <-addr:
		srv.url = "http://" + a
		return srv, false, nil
	case <-srv.exited:
		return nil, true, fmt.Errorf("load: chaos: serve exited at start:\n%s", srv.lastLines())
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	<-srv.exited
	return nil, false, fmt.Errorf("load: chaos: serve did not start within %s:\n%s", s.cfg.StartTimeout, srv.lastLines())
}

func (srv *server) lastLines() string {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return strings.Join(srv.tail, "\n")
}

// lastLine is the last non-empty line of text.
func lastLine(text string) string {
	text = strings.TrimRight(text, "\n")
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		return text[i+1:]
	}
	return text
}

// Run starts the faults — SIGKILLs, and the database restarts and NATS
// node shutdowns when configured, each on a schedule of its own — until
// ctx ends or Calm is called.
func (s *Supervisor) Run(ctx context.Context) {
	s.mu.Lock()
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	stop, done := s.stop, s.done
	s.mu.Unlock()
	var wg sync.WaitGroup
	every := func(mean time.Duration, rnd *rand.Rand, step func() error) {
		wg.Go(func() {
			for {
				d := time.Duration(float64(mean) * (0.5 + rnd.Float64()))
				select {
				case <-ctx.Done():
					return
				case <-stop:
					return
				case <-time.After(d):
				}
				if err := step(); err != nil {
					if err != errScheduleDone {
						s.logf("%v", err)
					}
					return
				}
			}
		})
	}
	every(s.cfg.KillEvery, s.rnd, func() error {
		if err := s.killOne(ctx); err != nil {
			return err
		}
		if s.cfg.Kills > 0 && s.Kills() >= s.cfg.Kills {
			return errScheduleDone
		}
		return nil
	})
	if s.cfg.DBRestart != "" {
		every(s.cfg.DBEvery, rand.New(rand.NewPCG(uint64(s.cfg.Seed), 17)), func() error {
			s.runDBCommand(ctx, "db_restart", s.cfg.DBRestart, &s.dbRestarts)
			return nil
		})
	}
	if s.cfg.Failover != "" {
		every(s.cfg.FailoverEvery, rand.New(rand.NewPCG(uint64(s.cfg.Seed), 23)), func() error {
			s.runDBCommand(ctx, "failover", s.cfg.Failover, &s.failovers)
			if s.cfg.Failovers > 0 && s.Failovers() >= s.cfg.Failovers {
				return errScheduleDone
			}
			return nil
		})
	}
	if s.nats != nil {
		rnd := rand.New(rand.NewPCG(uint64(s.cfg.Seed), 19))
		every(s.cfg.NATSEvery, rnd, func() error { return s.killNATSNode(stop, rnd.IntN(natsNodes)) })
	}
	go func() {
		wg.Wait()
		close(done)
	}()
}

// errScheduleDone ends a fault's schedule once it has made the count it
// was asked for (Config.Kills, Config.Failovers).
var errScheduleDone = errors.New("load: chaos: schedule done")

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
	s.pool.Add(next.url)
	s.mu.Lock()
	s.servers[i] = next
	s.restarted++
	s.mu.Unlock()
	return nil
}

// runDBCommand runs a database fault's command (what: "db_restart" or
// "failover") once, bounded by DBTimeout, and counts it in *done and
// s.faults (under s.mu). A failed command is logged and not counted; the
// schedule goes on.
func (s *Supervisor) runDBCommand(ctx context.Context, what, command string, done *int) {
	// Not cut short when the run ends: a restart killed halfway could
	// leave the database down.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.DBTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	// The command's children (pg_ctl, docker) may hold its output open
	// after a timeout kills the shell: stop waiting for them soon after.
	cmd.WaitDelay = 5 * time.Second
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		s.logf("%s failed after %s: %v: %s", what, time.Since(start).Round(time.Millisecond), err, strings.TrimSpace(out.String()))
		return
	}
	end := time.Now()
	s.mu.Lock()
	*done++
	n := *done
	s.faults = append(s.faults, run.FaultWindow{Kind: what, Start: start, End: end})
	s.mu.Unlock()
	// The command's last line says what it did ("promoted node2 … after
	// 9s"): the run's log keeps it beside the figures.
	s.logf("%s %d took %s: %s", what, n, end.Sub(start).Round(time.Millisecond), lastLine(strings.TrimSpace(out.String())))
}

// killNATSNode shuts NATS node i down and, after NATSDown (cut
// short by Calm), starts it again on its ports with its store, then waits
// until the cluster is healthy again so that the next shutdown never
// leaves the stream without a quorum.
func (s *Supervisor) killNATSNode(stop <-chan struct{}, i int) error {
	s.mu.Lock()
	s.natsKills++
	n := s.natsKills
	s.mu.Unlock()
	name := s.nats.nodes[i].name
	s.nats.stop(i)
	s.logf("NATS node down %d: %s", n, name)
	select {
	case <-stop:
	case <-time.After(s.cfg.NATSDown):
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.nats.start(i); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return err
	}
	// The health wait is bounded by StartTimeout, and a cluster still
	// catching up then is reported but not fatal.
	if err := s.nats.waitHealthy(context.Background()); err != nil {
		s.logf("%v", err)
	}
	s.logf("NATS node up: %s", name)
	return nil
}

// Calm stops the faults and waits for one in progress to finish (a server
// restarted, the database restart command done, a NATS node up again), so
// the verifier sees everything up.
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

// Close stops the faults and ends every server (SIGTERM, then SIGKILL
// after a few seconds), then the NATS cluster.
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
	if s.nats != nil {
		s.nats.Close()
	}
	_ = os.RemoveAll(s.dir)
}

// tailBuffer keeps the last 2 KiB written to it: a restart command's
// output, for the log when it fails.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2048 {
		b.buf = b.buf[len(b.buf)-2048:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
