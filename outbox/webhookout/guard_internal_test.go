package webhookout

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

// The guard's check on each connection's resolved address: internal
// addresses are refused unless allowed, and plain http reaches only
// allowed networks.
func TestGuardControl(t *testing.T) {
	allow, err := ParseNetworks("127.0.0.0/8, 10.1.0.0/16,192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	open, guarded := guard{allow: allow}, guard{}
	for _, c := range []struct {
		addr        string
		https       bool
		want, alone bool // with the allow-list, and without
	}{
		{"127.0.0.1:443", true, true, false},
		{"[::1]:443", true, false, false},
		{"169.254.169.254:80", false, false, false},
		{"169.254.169.254:443", true, false, false},
		{"[fd00:ec2::254]:443", true, false, false},
		{"10.1.2.3:443", true, true, false},
		{"10.2.0.1:443", true, false, false},
		{"172.16.0.1:443", true, false, false},
		{"192.168.0.1:443", true, false, false},
		{"100.64.0.1:443", true, false, false},
		{"0.0.0.0:443", true, false, false},
		{"[::ffff:127.0.0.1]:443", true, true, false},
		{"[::ffff:169.254.169.254]:443", true, false, false},
		{"[64:ff9b::a9fe:a9fe]:443", true, false, false},
		{"[fe80::1]:443", true, false, false},
		{"192.0.2.7:80", false, true, false},
		{"93.184.216.34:443", true, true, true},
		{"93.184.216.34:80", false, false, false}, // plain http to a public address
		{"[2606:2800:220:1::1]:443", true, true, true},
	} {
		for _, g := range []struct {
			g    guard
			want bool
		}{{open, c.want}, {guarded, c.alone}} {
			err := g.g.control(c.https)(context.Background(), "tcp", c.addr, nil)
			if got := err == nil; got != g.want {
				t.Errorf("allow %v: connect %s (https %v): %v, want allowed %v", g.g.allow, c.addr, c.https, err, g.want)
			}
			if err != nil && !errors.Is(err, ErrForbiddenAddress) {
				t.Errorf("%s: %v is not ErrForbiddenAddress", c.addr, err)
			}
		}
	}
	if _, err := ParseNetworks("10.0.0.0/33"); err == nil {
		t.Error("ParseNetworks took a bad prefix")
	}
	if p, _ := ParseNetworks("10.1.2.3/8"); len(p) != 1 || p[0] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("ParseNetworks did not mask: %v", p)
	}
}
