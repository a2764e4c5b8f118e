package console

import (
	"sync"
	"time"
)

// maxSessions bounds the sessions one console holds at once; a login past
// it ends the session that expires first (the oldest login).
const maxSessions = 1000

// sessionStore holds the live sessions, by nonce. A session token is
// signed, so it cannot be forged, but a signature cannot be taken back:
// logging out must end the session here, where every request is checked.
// The store is in memory, like the signing secret: a session is valid only
// on the process that made it, so there is nothing to share with others.
type sessionStore struct {
	mu      sync.Mutex
	expires map[string]time.Time
}

func newSessionStore() *sessionStore {
	return &sessionStore{expires: map[string]time.Time{}}
}

// add records a new session, first dropping expired ones when the store
// is full, then the one that expires first.
func (s *sessionStore) add(nonce string, expires, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.expires) >= maxSessions {
		for n, exp := range s.expires {
			if !now.Before(exp) {
				delete(s.expires, n)
			}
		}
	}
	if len(s.expires) >= maxSessions {
		var first string
		for n, exp := range s.expires {
			if first == "" || exp.Before(s.expires[first]) {
				first = n
			}
		}
		delete(s.expires, first)
	}
	s.expires[nonce] = expires
}

// live reports whether the session is live at now.
func (s *sessionStore) live(nonce string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.expires[nonce]
	if ok && !now.Before(exp) {
		delete(s.expires, nonce)
		return false
	}
	return ok
}

// end ends a session: its token is refused from now on.
func (s *sessionStore) end(nonce string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.expires, nonce)
}

func (s *sessionStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.expires)
}
