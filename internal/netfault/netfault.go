// Package netfault is a TCP proxy that tests put between a process and its
// database to partition the network: Blackhole stops forwarding in both
// directions without closing anything, as a network that drops packets
// does (nobody is told; every wait is the waiter's to bound), and Heal
// delivers what was held, late, as TCP does once the network returns.
// DropAnswer loses one answer: the server gets a request and acts on it,
// the client never hears back, as when a connection breaks in between.
package netfault

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy forwards connections accepted on Addr to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	healed *sync.Cond // broadcast when blackholed turns false or the proxy closes
	holed  bool
	closed bool
	marker []byte // DropAnswer's, while armed
	pairs  map[*pair]struct{}
	wg     sync.WaitGroup
}

type pair struct {
	client, server net.Conn
	dropNext       bool // the server's next bytes to the client are lost, and the connection with them
}

// Start listens on a free loopback port and forwards to target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, pairs: map[*pair]struct{}{}}
	p.healed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole stops forwarding: bytes already read and every byte after wait
// in the proxy, connections stay open, and new ones are accepted but reach
// nothing until Heal.
func (p *Proxy) Blackhole() { p.set(true) }

// Heal forwards again, held bytes first.
func (p *Proxy) Heal() { p.set(false) }

// DropAnswer arms the proxy once: the first client message that contains
// marker reaches the server, and the server's answer to it never reaches
// the client, whose connection is closed instead (the server's too, once
// it answered). The server acts on the message as it would on any.
func (p *Proxy) DropAnswer(marker []byte) {
	p.mu.Lock()
	p.marker = bytes.Clone(marker)
	p.mu.Unlock()
}

func (p *Proxy) set(holed bool) {
	p.mu.Lock()
	p.holed = holed
	p.mu.Unlock()
	p.healed.Broadcast()
}

// Conns is how many client connections the proxy holds open: one for
// each the client has not closed (or the server, outside a blackhole).
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for pr := range p.pairs {
		pr.client.Close()
		if pr.server != nil {
			pr.server.Close()
		}
	}
	p.mu.Unlock()
	p.healed.Broadcast()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		pr := &pair{client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.pairs[pr] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pr)
	}
}

// serve connects pr to the target once the network is up, then pumps
// both ways until either side ends, and closes both.
func (p *Proxy) serve(pr *pair) {
	defer p.wg.Done()
	defer p.drop(pr)
	if !p.wait() {
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	pr.server = s
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pump(s, pr.client, pr, true); done <- struct{}{} }()
	go func() { p.pump(pr.client, s, pr, false); done <- struct{}{} }()
	<-done
	// One side ended: end the other, so its pump returns too.
	pr.client.Close()
	s.Close()
	<-done
}

func (p *Proxy) drop(pr *pair) {
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
	pr.client.Close()
	if pr.server != nil {
		pr.server.Close()
	}
}

// arm marks pr's next answer as lost when chunk, sent to the server,
// carries the armed DropAnswer marker. A marker split across two reads is
// missed: tests mark short messages, which travel in one.
func (p *Proxy) arm(pr *pair, chunk []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marker != nil && bytes.Contains(chunk, p.marker) {
		p.marker = nil
		pr.dropNext = true
	}
}

// dropped reports whether the server's bytes now read are pr's lost answer.
func (p *Proxy) dropped(pr *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return pr.dropNext
}

// wait blocks while the network is blackholed; false once the proxy closed.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.holed && !p.closed {
		p.healed.Wait()
	}
	return !p.closed
}

// pump copies src to dst, holding each chunk while the network is
// blackholed. up is the client-to-server direction of pr.
func (p *Proxy) pump(dst, src net.Conn, pr *pair, up bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if !up && p.dropped(pr) {
				return // serve closes both ends: the answer is lost
			}
			if up { // before the server can answer
				p.arm(pr, buf[:n])
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// An end is held like data: a partition drops FINs too.
			if !errors.Is(err, io.EOF) || !p.wait() {
				return
			}
			// Half-close: the reader sees the end after what was sent.
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}
