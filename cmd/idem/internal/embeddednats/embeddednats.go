// Package embeddednats runs a NATS server with JetStream inside the idem
// process: the zero-set-up broker of idem serve and idem relay. By default
// it binds no port (clients connect in-process), so several idem processes
// can run on one machine; tests ask it to listen on a loopback port so that
// child processes can reach it.
package embeddednats

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config configures Start.
type Config struct {
	// DataDir holds JetStream's files. Default ./idem-data/nats.
	DataDir string
	// Listen, when set, is a host:port to accept clients on (port -1 or 0
	// picks a free one). Default: no listener, in-process clients only.
	Listen string
	// StartTimeout bounds the wait for the server to accept clients.
	// Default 10s; bound 100ms..5m.
	StartTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = filepath.Join("idem-data", "nats")
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 10 * time.Second
	}
	return c
}

// Server is a running embedded NATS server.
type Server struct {
	s    *server.Server
	lock *os.File // held while the server owns DataDir
}

// Start starts the server and waits until it accepts clients.
func Start(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.StartTimeout < 100*time.Millisecond || cfg.StartTimeout > 5*time.Minute {
		return nil, fmt.Errorf("embeddednats: StartTimeout %s is outside 100ms..5m", cfg.StartTimeout)
	}
	// Two servers writing one JetStream directory would corrupt it, and
	// nats-server does not refuse that by itself: hold an exclusive lock.
	lock, err := lockDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: "idem",
		JetStream:  true,
		StoreDir:   cfg.DataDir,
		NoSigs:     true,
		NoLog:      true,
	}
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := splitHostPort(cfg.Listen)
		if err != nil {
			lock.Close()
			return nil, err
		}
		opts.Host, opts.Port = host, port
	}
	s, err := server.NewServer(opts)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("embeddednats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(cfg.StartTimeout) {
		s.Shutdown()
		lock.Close()
		return nil, errors.New("embeddednats: server not ready in time")
	}
	return &Server{s: s, lock: lock}, nil
}

func splitHostPort(hp string) (string, int, error) {
	var host string
	var port int
	i := len(hp) - 1
	for i >= 0 && hp[i] != ':' {
		i--
	}
	if i < 0 {
		return "", 0, fmt.Errorf("embeddednats: Listen %q: want host:port", hp)
	}
	host = hp[:i]
	if _, err := fmt.Sscanf(hp[i+1:], "%d", &port); err != nil {
		return "", 0, fmt.Errorf("embeddednats: Listen %q: bad port", hp)
	}
	if port == 0 {
		port = -1 // nats-server's "pick a free port"
	}
	return host, port, nil
}

// Connect opens a client connection: in-process when the server does not
// listen, else over loopback.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.s), nats.Name("idem")}, opts...)
	return nats.Connect("", opts...)
}

// ClientURL is the nats:// URL other processes connect to; "" when the
// server does not listen.
func (s *Server) ClientURL() string {
	if s.s.Addr() == nil {
		return ""
	}
	return s.s.ClientURL()
}

// Shutdown stops the server, waits for it, and releases DataDir.
func (s *Server) Shutdown() {
	s.s.Shutdown()
	s.s.WaitForShutdown()
	s.lock.Close()
}

// lockDir takes an exclusive lock on dir/LOCK, released when the returned
// file is closed or the process dies.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embeddednats: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embeddednats: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("embeddednats: %s is in use by another process (another idem with the embedded broker?); "+
			"give each process its own data directory or share one broker with --publish nats://…: %w", dir, err)
	}
	return f, nil
}
