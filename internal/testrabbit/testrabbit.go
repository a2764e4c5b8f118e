// Package testrabbit gives tests a real RabbitMQ: a private node started by
// the project's scripts/rabbitmq in a temporary directory (its own name,
// ports, cookie and data), stopped when the test ends. There is no skip: a
// test that needs RabbitMQ and cannot have it fails, saying what to
// install. Like internal/testpg, the script is embedded and written beside
// the node, so no source tree is looked for; test code never installs
// anything (scripts/test does, before go test).
package testrabbit

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testserver"
)

// Node is one RabbitMQ node of a test's own.
type Node struct {
	// URL is amqp://guest:guest@127.0.0.1:PORT/, the default vhost.
	URL string
	// TLSURL is amqps://guest:guest@127.0.0.1:PORT/ for a node StartTLS
	// started, empty otherwise.
	TLSURL string
	dir    string
}

// TLSFiles are the PEM files of a node's TLS listener: its certificate and
// key, and the CA that signed it. The node asks no client for a
// certificate (one-way TLS, password login).
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// errNotInstalled is the one instruction a test without RabbitMQ gets.
var errNotInstalled = fmt.Errorf("no RabbitMQ: install it (Debian: apt-get install rabbitmq-server, or scripts/rabbitmq install)")

// Installed reports whether the script can start a node.
func Installed() bool {
	fi, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server")
	if err != nil || fi.Mode()&0o111 == 0 {
		return false
	}
	_, err = exec.LookPath("epmd")
	return err == nil
}

// rabbitScript is scripts/rabbitmq's script.
//
//go:embed rabbitmq.bash
var rabbitScript []byte

// Start starts a node for tb, stopped and removed when tb ends. A node
// takes tens of seconds to start on a loaded machine, so tests share one
// where they can.
func Start(tb testing.TB) *Node {
	tb.Helper()
	n, err := start(nil)
	if err != nil {
		tb.Fatalf("testrabbit: %v", err)
	}
	tb.Cleanup(n.Stop)
	return n
}

// StartTLS starts a node for tb, as Start, that also listens for TLS
// (amqps://, its TLSURL) on a free loopback port with the certificate in
// files.
func StartTLS(tb testing.TB, files TLSFiles) *Node {
	tb.Helper()
	n, err := start(&files)
	if err != nil {
		tb.Fatalf("testrabbit: %v", err)
	}
	tb.Cleanup(n.Stop)
	return n
}

// StartMain starts a node for a package's tests, from TestMain; the caller
// stops it (Stop) after m.Run.
func StartMain() (*Node, error) { return start(nil) }

func start(files *TLSFiles) (*Node, error) {
	if !Installed() {
		return nil, errNotInstalled
	}
	parent, err := os.MkdirTemp("", "idem-testrabbit-")
	if err != nil {
		return nil, err
	}
	if _, err := testserver.WriteScript(parent, "rabbitmq.bash", rabbitScript); err != nil {
		return nil, err
	}
	n := &Node{dir: filepath.Join(parent, "node")}
	// --watch: the node goes with this process, should it die before Stop.
	args := []string{"start", n.dir, "--watch", strconv.Itoa(os.Getpid())}
	if files != nil {
		args = append(args, "--tls", files.CertFile, files.KeyFile, files.CAFile)
	}
	out, err := n.script(args...).Output()
	if err != nil {
		_ = os.RemoveAll(parent)
		return nil, fmt.Errorf("start RabbitMQ: %w %s", err, stderrOf(err))
	}
	urls, want := strings.Fields(string(out)), 1
	if files != nil {
		want = 2
	}
	if len(urls) != want {
		n.Stop()
		return nil, fmt.Errorf("start RabbitMQ: the script printed %q, want the node's URLs", out)
	}
	n.URL = urls[0]
	if files != nil {
		n.TLSURL = urls[1]
	}
	return n, nil
}

func (n *Node) script(args ...string) *exec.Cmd {
	cmd := exec.Command("bash", append([]string{filepath.Join(filepath.Dir(n.dir), "rabbitmq.bash")}, args...)...)
	cmd.Env = append(os.Environ(), "IDEM_RABBITMQ_NO_INSTALL=1")
	// From /: a server started as the postgres user inherits the working
	// directory, and the test's (a checkout under a home only root may
	// enter) may be closed to it.
	cmd.Dir = "/"
	return cmd
}

// Restart kills the node (SIGKILL, no clean shutdown) and starts it again
// on the same port with the same data: durable queues and the persistent
// messages they had confirmed survive.
func (n *Node) Restart(tb testing.TB) {
	tb.Helper()
	if _, err := n.script("restart", n.dir).Output(); err != nil {
		tb.Fatalf("testrabbit: restart: %v %s", err, stderrOf(err))
	}
}

// Stop stops the node and removes its directory.
func (n *Node) Stop() {
	_ = n.script("stop", n.dir).Run()
	_ = os.RemoveAll(filepath.Dir(n.dir))
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
