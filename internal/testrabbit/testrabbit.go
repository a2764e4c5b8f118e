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
)

// Node is one RabbitMQ node of a test's own.
type Node struct {
	// URL is amqp://guest:guest@127.0.0.1:PORT/, the default vhost.
	URL string
	dir string
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
	n, err := start()
	if err != nil {
		tb.Fatalf("testrabbit: %v", err)
	}
	tb.Cleanup(n.Stop)
	return n
}

// StartMain starts a node for a package's tests, from TestMain; the caller
// stops it (Stop) after m.Run.
func StartMain() (*Node, error) { return start() }

func start() (*Node, error) {
	if !Installed() {
		return nil, errNotInstalled
	}
	parent, err := os.MkdirTemp("", "idem-testrabbit-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(parent, "rabbitmq.bash"), rabbitScript, 0o644); err != nil {
		return nil, err
	}
	n := &Node{dir: filepath.Join(parent, "node")}
	// --watch: the node goes with this process, should it die before Stop.
	out, err := n.script("start", n.dir, "--watch", strconv.Itoa(os.Getpid())).Output()
	if err != nil {
		_ = os.RemoveAll(parent)
		return nil, fmt.Errorf("start RabbitMQ: %w %s", err, stderrOf(err))
	}
	n.URL = strings.TrimSpace(string(out))
	return n, nil
}

func (n *Node) script(args ...string) *exec.Cmd {
	cmd := exec.Command("bash", append([]string{filepath.Join(filepath.Dir(n.dir), "rabbitmq.bash")}, args...)...)
	cmd.Env = append(os.Environ(), "IDEM_RABBITMQ_NO_INSTALL=1")
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
