package console

import (
	"fmt"
	"testing"
	"time"
)

// The login limiter remembers at most its bound of addresses, forgetting
// the one that failed longest ago first.
func TestLoginLimiterIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	l := newLoginLimiter(2, time.Second, 100)
	addr := func(i int) string { return fmt.Sprintf("10.0.0.%d", i) }
	for i := range 250 {
		l.fail(addr(i), now)
	}
	if n := l.tracked(); n != 100 {
		t.Fatalf("limiter tracks %d addresses, want its bound 100", n)
	}
	// The newest are kept: three more failures hold the newest back.
	newest := addr(249)
	for range 3 {
		l.fail(newest, now)
	}
	if l.wait(newest, now) <= 0 {
		t.Fatal("the newest address was forgotten")
	}
	if l.wait(addr(0), now) != 0 {
		t.Fatal("the oldest address is still limited past the bound")
	}
}

// The session store holds at most maxSessions: expired sessions go first,
// then the one that expires first.
func TestSessionStoreIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	s := newSessionStore()
	for i := range maxSessions + 50 {
		s.add(fmt.Sprintf("n%d", i), now.Add(time.Hour+time.Duration(i)*time.Second), now)
	}
	if n := s.len(); n != maxSessions {
		t.Fatalf("store holds %d sessions, want %d", n, maxSessions)
	}
	if s.live("n0", now) {
		t.Fatal("the session that expires first survived the bound")
	}
	if !s.live(fmt.Sprintf("n%d", maxSessions+49), now) {
		t.Fatal("the newest session was dropped")
	}
}
