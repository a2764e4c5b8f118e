package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsNodes is the size of the chaos run's NATS cluster: three, so that a
// stream with three replicas keeps its quorum (two) with one node down.
const natsNodes = 3

// natsCluster is a JetStream cluster of natsNodes nats-server instances in
// this process, on fixed loopback ports, for the chaos servers to publish
// to. A node that is shut down starts again on the same ports with the
// same store directory, as a restarted server of a real cluster does.
type natsCluster struct {
	timeout time.Duration
	mu      sync.Mutex
	nodes   []*natsNode
}

type natsNode struct {
	name       string
	clientPort int
	routePort  int
	storeDir   string
	srv        *natsserver.Server // nil while down
}

// startNATSCluster starts the cluster's nodes under dir and returns once
// JetStream has a leader and every node reports healthy.
func startNATSCluster(ctx context.Context, dir string, timeout time.Duration) (*natsCluster, error) {
	c := &natsCluster{timeout: timeout}
	used := map[int]bool{}
	for i := range natsNodes {
		client, err := freePort(used)
		if err != nil {
			return nil, err
		}
		route, err := freePort(used)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, &natsNode{name: fmt.Sprintf("idem-load-%d", i+1), clientPort: client,
			routePort: route, storeDir: filepath.Join(dir, fmt.Sprintf("nats-%d", i+1))})
	}
	for i := range c.nodes {
		if err := c.start(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.waitHealthy(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// freePort picks a free loopback port below Linux's ephemeral range, so
// that the kernel does not hand it to another socket while its node is
// down. It cannot rule out another program taking it meanwhile; a node
// that cannot bind its port again fails its restart with a clear error.
func freePort(used map[int]bool) (int, error) {
	for range 200 {
		p := 20000 + rand.IntN(12000)
		if used[p] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		used[p] = true
		return p, nil
	}
	return 0, errors.New("load: chaos: no free loopback port for NATS")
}

// options builds node i's options afresh (the server keeps and changes
// the ones it is given).
func (c *natsCluster) options(i int) *natsserver.Options {
	n := c.nodes[i]
	var routes []string
	for j, o := range c.nodes {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.routePort))
		}
	}
	return &natsserver.Options{
		ServerName: n.name,
		Host:       "127.0.0.1",
		Port:       n.clientPort,
		Cluster: natsserver.ClusterOpts{
			Name: "idem-load",
			Host: "127.0.0.1",
			Port: n.routePort,
		},
		Routes:    natsserver.RoutesFromStr(strings.Join(routes, ",")),
		JetStream: true,
		StoreDir:  n.storeDir,
		NoSigs:    true,
		NoLog:     true,
	}
}

// start starts node i and waits until it accepts clients.
func (c *natsCluster) start(i int) error {
	s, err := natsserver.NewServer(c.options(i))
	if err != nil {
		return fmt.Errorf("load: chaos: NATS node %s: %w", c.nodes[i].name, err)
	}
	go s.Start()
	if !s.ReadyForConnections(c.timeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("load: chaos: NATS node %s did not accept clients on 127.0.0.1:%d within %s (port taken?)",
			c.nodes[i].name, c.nodes[i].clientPort, c.timeout)
	}
	c.mu.Lock()
	c.nodes[i].srv = s
	c.mu.Unlock()
	return nil
}

// stop shuts node i down and waits for it.
func (c *natsCluster) stop(i int) {
	c.mu.Lock()
	s := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// waitHealthy waits until JetStream answers through the cluster (it has a
// meta leader) and every running node's health check passes (its streams
// are current), bounded by the cluster's timeout.
func (c *natsCluster) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	nc, err := nats.Connect(c.URL(), nats.Name("idem load chaos"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("load: chaos: connect to NATS cluster: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("load: chaos: %w", err)
	}
	var last string
	for {
		last = ""
		// A request no server answers (no leader yet) waits for its
		// context: bound each attempt.
		actx, acancel := context.WithTimeout(ctx, time.Second)
		_, err := js.AccountInfo(actx)
		acancel()
		if err != nil {
			last = "JetStream: " + err.Error()
		}
		c.mu.Lock()
		for _, n := range c.nodes {
			if n.srv == nil || last != "" {
				continue
			}
			if h := n.srv.Healthz(&natsserver.HealthzOptions{}); h.StatusCode != 200 {
				last = fmt.Sprintf("node %s: %s %s", n.name, h.Status, h.Error)
			}
		}
		c.mu.Unlock()
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("load: chaos: NATS cluster not healthy within %s: %s", c.timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// URL is the client URLs of every node, comma-separated (nats.go's form
// of a server list).
func (c *natsCluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", n.clientPort)
	}
	return strings.Join(urls, ",")
}

// Close shuts every node down.
func (c *natsCluster) Close() {
	for i := range c.nodes {
		c.stop(i)
	}
}
