package main

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/config"
)

// The profiler answers a loopback Host without an admin key, and only the
// admin key's bearer with one.
func TestDebugHandler(t *testing.T) {
	t.Parallel()
	key := sha256.Sum256([]byte("admin-key-of-sixteen"))
	for _, c := range []struct {
		name   string
		key    *[sha256.Size]byte
		host   string
		bearer string
		want   int
	}{
		{"loopback, no key", nil, "127.0.0.1:6060", "", http.StatusOK},
		{"rebinding, no key", nil, "evil.example:6060", "", http.StatusForbidden},
		{"key, none sent", &key, "10.0.0.1:6060", "", http.StatusUnauthorized},
		{"key, wrong one", &key, "10.0.0.1:6060", "not-the-admin-key", http.StatusUnauthorized},
		{"key", &key, "10.0.0.1:6060", "admin-key-of-sixteen", http.StatusOK},
	} {
		r := httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil)
		r.Host = c.host
		if c.bearer != "" {
			r.Header.Set("Authorization", "Bearer "+c.bearer)
		}
		w := httptest.NewRecorder()
		debugHandler(c.key).ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s: %d, want %d", c.name, w.Code, c.want)
		}
		if c.want == http.StatusOK && !strings.Contains(w.Body.String(), "goroutine") {
			t.Errorf("%s: not the profiler's index:\n%s", c.name, w.Body.String())
		}
	}
}

// --debug-addr must be loopback unless an admin key is set.
func TestDebugAddrConfig(t *testing.T) {
	t.Parallel()
	env := func(string) string { return "" }
	if c, err := config.Load("serve", []string{"--debug-addr", "127.0.0.1:6060"}, env, config.ServeSettings...); err != nil || c.DebugAddr != "127.0.0.1:6060" {
		t.Fatalf("loopback: %v %q", err, c.DebugAddr)
	}
	if _, err := config.Load("serve", []string{"--debug-addr", "0.0.0.0:6060"}, env, config.ServeSettings...); err == nil || !strings.Contains(err.Error(), "debug-addr") {
		t.Fatalf("public without an admin key: %v", err)
	}
	if _, err := config.Load("serve", []string{"--debug-addr", "0.0.0.0:6060", "--admin-key", "admin-key-of-sixteen"}, env, config.ServeSettings...); err != nil {
		t.Fatalf("public with an admin key: %v", err)
	}
}
