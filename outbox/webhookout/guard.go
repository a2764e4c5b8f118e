package webhookout

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrForbiddenAddress is wrapped by the error of a connection the SSRF
// guard refused: its address is loopback, private, link-local, a cloud
// metadata address or otherwise internal, and in no allowed network; or
// the URL is plain http to an address in no allowed network.
var ErrForbiddenAddress = errors.New("webhookout: address not allowed")

// blocked are the networks no delivery reaches unless allowed, besides
// those netip classifies (loopback, private, link-local, multicast,
// unspecified): addresses that are internal by convention.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),  // reserved and broadcast
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64: an IPv4 address inside
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("2002::/16"), // 6to4: an IPv4 address inside
}

// ParseNetworks reads a comma-separated list of CIDR networks
// ("127.0.0.0/8,10.0.0.0/8"); a bare address is its own /32 or /128.
func ParseNetworks(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "/") {
			a, err := netip.ParseAddr(part)
			if err != nil {
				return nil, fmt.Errorf("webhookout: network %q: want a CIDR network or an address", part)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("webhookout: network %q: want a CIDR network or an address", part)
		}
		out = append(out, p.Masked())
	}
	if len(out) > 256 {
		return nil, errors.New("webhookout: more than 256 allowed networks")
	}
	return out, nil
}

// guard decides which addresses a delivery may connect to.
type guard struct {
	allow []netip.Prefix
}

func (g guard) allowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range g.allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// internal reports whether a is an address a delivery must not reach
// unless allowed.
func internal(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || !a.IsValid() {
		return true
	}
	for _, p := range blocked {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// permits reports whether a delivery may connect to a: over https any
// address that is not internal, or an allowed one; over plain http only
// an allowed one.
func (g guard) permits(a netip.Addr, https bool) bool {
	if g.allowed(a) {
		return true
	}
	return https && !internal(a)
}

// checkURL refuses what can be refused before any connection: a URL that
// is not absolute http(s), and one whose host is an address the guard
// would refuse. A host name is checked at each connection, on the address
// it resolved to (a DNS answer cannot smuggle an internal address in).
func (g guard) checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("must be an absolute http or https URL")
	}
	if u.Fragment != "" {
		return nil, errors.New("must have no fragment")
	}
	https := u.Scheme == "https"
	if a, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
		if !g.permits(a, https) {
			if !https && !internal(a) {
				return nil, fmt.Errorf("must be https: %s is in no allowed network", a)
			}
			return nil, fmt.Errorf("%w: %s is internal and in no allowed network", ErrForbiddenAddress, a)
		}
	} else if !https && len(g.allow) == 0 {
		return nil, errors.New("must be https (plain http only to allowed networks)")
	}
	return u, nil
}

// control runs on every connection's resolved address, before it
// connects: it is the check that a DNS answer cannot get around.
func (g guard) control(https bool) func(ctx context.Context, network, address string, c syscall.RawConn) error {
	return func(_ context.Context, network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrForbiddenAddress, address)
		}
		if !g.permits(ap.Addr(), https) {
			if !https && !internal(ap.Addr()) {
				return fmt.Errorf("%w: plain http to %s, which is in no allowed network", ErrForbiddenAddress, ap.Addr())
			}
			return fmt.Errorf("%w: %s is internal and in no allowed network", ErrForbiddenAddress, ap.Addr())
		}
		return nil
	}
}

// clients are the delivery clients: one per scheme, each with the guard's
// check on its connections. They follow no redirect (a 3xx is a failed
// attempt) and use no proxy from the environment, which would connect in
// the guard's place.
type clients struct {
	https, http *http.Client
}

func newClients(g guard, timeout time.Duration, resolver *net.Resolver) clients {
	mk := func(https bool) *http.Client {
		d := &net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second,
			ControlContext: g.control(https), Resolver: resolver}
		t := &http.Transport{
			Proxy:                  nil,
			DialContext:            d.DialContext,
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           256,
			MaxIdleConnsPerHost:    16,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    min(timeout, 10*time.Second),
			ResponseHeaderTimeout:  timeout,
			MaxResponseHeaderBytes: 64 << 10,
		}
		return &http.Client{Transport: t, Timeout: timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return clients{https: mk(true), http: mk(false)}
}

func (c clients) For(u *url.URL) *http.Client {
	if u.Scheme == "https" {
		return c.https
	}
	return c.http
}

func (c clients) close() {
	c.https.CloseIdleConnections()
	c.http.CloseIdleConnections()
}
