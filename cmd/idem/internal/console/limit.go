package console

import (
	"container/list"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

const (
	// loginBurst failed logins from one address are answered at once;
	// after them, one more every loginInterval. The admin key has at least
	// 16 characters, so this is not what keeps it from being guessed: it
	// keeps a guesser from filling the log and the CPU.
	loginBurst    = 10
	loginInterval = 6 * time.Second
	// maxLoginClients bounds the addresses the limiter remembers; past it
	// the one that failed longest ago is forgotten.
	maxLoginClients = 10000
)

// loginLimiter limits failed logins per client address with the generic
// cell rate algorithm: each address has a theoretical arrival time, which
// each failure pushes loginInterval later. An address may try while that
// time is less than burst × interval ahead of now, so it has a burst of
// failures and then one per interval. An address whose time is past holds
// no state, and only failures are remembered: an operator who logs in
// right costs nothing.
type loginLimiter struct {
	burst    int
	interval time.Duration
	max      int

	mu sync.Mutex
	// clients maps an address to its element in order, whose Value is a
	// *loginClient; order runs from the latest failure to the oldest.
	clients map[string]*list.Element
	order   *list.List
}

type loginClient struct {
	addr string
	tat  time.Time
}

func newLoginLimiter(burst int, interval time.Duration, maxClients int) *loginLimiter {
	return &loginLimiter{burst: burst, interval: interval, max: maxClients,
		clients: map[string]*list.Element{}, order: list.New()}
}

// wait is how long addr must wait before its next attempt; 0 means it may
// try now.
func (l *loginLimiter) wait(addr string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.clients[addr]
	if !ok {
		return 0
	}
	c := e.Value.(*loginClient)
	over := c.tat.Sub(now) + l.interval - time.Duration(l.burst)*l.interval
	if over <= 0 {
		return 0
	}
	return over
}

// fail records a failed attempt of addr.
func (l *loginLimiter) fail(addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.clients[addr]
	if !ok {
		if l.order.Len() >= l.max {
			oldest := l.order.Back()
			l.order.Remove(oldest)
			delete(l.clients, oldest.Value.(*loginClient).addr)
		}
		e = l.order.PushFront(&loginClient{addr: addr, tat: now})
		l.clients[addr] = e
	}
	c := e.Value.(*loginClient)
	if c.tat.Before(now) {
		c.tat = now
	}
	c.tat = c.tat.Add(l.interval)
	l.order.MoveToFront(e)
}

// tracked is how many addresses the limiter remembers.
func (l *loginLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

// clientAddr is the address a request's failures are counted against:
// its connection's IP, or for IPv6 its /64, which one machine commonly
// holds whole. Behind a reverse proxy every client is the proxy.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64) // 64 bits always fit an IPv6 address
		return p.String()
	}
	return ip.String()
}
