package netfault

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Blackhole holds bytes without closing; Heal delivers them; Close ends
// every connection and goroutine.
func TestBlackhole(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	p, err := Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(line string) {
		t.Helper()
		if _, err := io.WriteString(c, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	echo("one")
	if got, err := r.ReadString('\n'); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	p.Blackhole()
	echo("two")
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a blackhole: %v, want nothing and no close", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if p.Conns() != 1 {
		t.Fatalf("connections during the blackhole: %d", p.Conns())
	}
	p.Heal()
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after healing: %q, %v", got, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("the connection outlived the proxy")
	}
}
