package console_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/internal/drivertest"
)

// TestConsoleWithoutAdminKeyAnswersOnlyLoopbackNames: without an admin
// key the console trusts loopback clients, and a page of another site
// that had its own name resolve to 127.0.0.1 (DNS rebinding) is one. It
// still names itself in Host, and is answered 421 without a page.
func TestConsoleWithoutAdminKeyAnswersOnlyLoopbackNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	e.tellStory(t)
	h := e.Console.Handler()
	for _, c := range []struct {
		host string
		want int
	}{
		{"evil.example", http.StatusMisdirectedRequest},
		{"evil.example:8080", http.StatusMisdirectedRequest},
		{"127.0.0.1.nip.io:8080", http.StatusMisdirectedRequest},
		{"", http.StatusMisdirectedRequest},
		{"localhost", http.StatusOK},
		{"LOCALHOST.:8080", http.StatusOK},
		{"127.0.0.1:43210", http.StatusOK},
		{"[::1]:43210", http.StatusOK},
	} {
		w := do(t, h, http.MethodGet, "/ui/keys?tenant=default&key=charge-1", loopback, nil, "Host", c.host)
		if w.Code != c.want {
			t.Errorf("Host %q: status %d, want %d", c.host, w.Code, c.want)
		}
		if leaked := strings.Contains(w.Body.String(), "POST /v1/transfers"); leaked != (c.want == http.StatusOK) {
			t.Errorf("Host %q: the stored answer shown: %v", c.host, leaked)
		}
		if c.want == http.StatusMisdirectedRequest && !strings.Contains(w.Body.String(), `"code":"misdirected_request"`) {
			t.Errorf("Host %q: %s", c.host, w.Body)
		}
	}
	// A form post under a foreign name changes nothing either.
	page := do(t, h, http.MethodGet, "/ui/outbox", loopback, nil).Body.String()
	w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, url.Values{"id": {"msg-1"}, "csrf": {csrfOf(t, page)}},
		"Host", "evil.example:8080", "Origin", "http://evil.example:8080")
	if w.Code != http.StatusMisdirectedRequest || len(e.Outbox.Redriven()) != 0 {
		t.Fatalf("rebound redrive: %d, redriven %v", w.Code, e.Outbox.Redriven())
	}
	// With an admin key the key is the authority, whatever the name.
	keyed := newEnv(t, "sqlite", adminHash())
	if w := do(t, keyed.Console.Handler(), http.MethodGet, "/ui/", remote, nil, "Host", "idem.example.com",
		"Authorization", "Bearer "+adminKey); w.Code != http.StatusOK {
		t.Fatalf("admin key under a public name: %d", w.Code)
	}
}

// TestFormPostsFromAnotherSiteAreRefused: a browser says where a post
// comes from (Sec-Fetch-Site, else Origin); a post from another site's
// page is refused even with a valid session and CSRF token, and changes
// nothing.
func TestFormPostsFromAnotherSiteAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", adminHash())
	h := e.Console.Handler()
	ck := do(t, h, http.MethodPost, "/ui/login", loopback, url.Values{"key": {adminKey}}).Result().Cookies()[0]
	cookie := ck.Name + "=" + ck.Value
	token := csrfOf(t, do(t, h, http.MethodGet, "/ui/outbox", loopback, nil, "Cookie", cookie).Body.String())
	redrive := url.Values{"id": {"msg-1"}, "csrf": {token}}

	foreign := [][]string{
		{"Origin", "http://evil.example"},
		{"Origin", "null"},
		{"Origin", "http://localhost:9999"}, // another port is another origin
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Sec-Fetch-Site", "cross-site", "Origin", "http://" + consoleHost},
		{"Referer", "http://evil.example/page"}, // a browser too old for the two above
	}
	for _, hdr := range foreign {
		w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, redrive, append([]string{"Cookie", cookie}, hdr...)...)
		if w.Code != http.StatusForbidden {
			t.Errorf("redrive with %v: status %d, want 403", hdr, w.Code)
		}
		w = do(t, h, http.MethodPost, "/ui/logout", loopback, url.Values{"csrf": {token}}, append([]string{"Cookie", cookie}, hdr...)...)
		if w.Code != http.StatusForbidden {
			t.Errorf("logout with %v: status %d, want 403", hdr, w.Code)
		}
		w = do(t, h, http.MethodPost, "/ui/login", loopback, url.Values{"key": {adminKey}}, hdr...)
		if w.Code != http.StatusForbidden || len(w.Result().Cookies()) != 0 {
			t.Errorf("login with %v: status %d, cookies %v", hdr, w.Code, w.Result().Cookies())
		}
	}
	if got := e.Outbox.Redriven(); len(got) != 0 {
		t.Fatalf("refused posts redrove %v", got)
	}
	if w := do(t, h, http.MethodGet, "/ui/outbox", loopback, nil, "Cookie", cookie); w.Code != http.StatusOK {
		t.Fatalf("a refused logout ended the session: %d", w.Code)
	}

	// The console's own pages post same-origin; a client that is not a
	// browser sends none of the headers.
	for i, hdr := range [][]string{
		{"Sec-Fetch-Site", "same-origin", "Origin", "http://" + consoleHost},
		{"Origin", "http://" + consoleHost},
		{"Referer", "http://" + consoleHost + "/ui/outbox"},
		nil,
	} {
		id := []string{"msg-1", "msg-2", "msg-3", "msg-4"}[i]
		w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, url.Values{"id": {id}, "csrf": {token}, "confirm": {"1"}}, append([]string{"Cookie", cookie}, hdr...)...)
		if want := []int{http.StatusSeeOther, http.StatusSeeOther, http.StatusNotFound, http.StatusNotFound}[i]; w.Code != want {
			t.Errorf("redrive %s with %v: status %d, want %d", id, hdr, w.Code, want)
		}
	}
	if got := e.Outbox.Redriven(); len(got) != 2 {
		t.Fatalf("same-origin redrives: %v", got)
	}
}

// logSink keeps every record a logger writes.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestFailedLoginsAreLimitedAndLogged: ten wrong keys from one address are
// answered; the eleventh attempt, even with the right key, is 429 with
// Retry-After until a failure's worth of time has passed. Each failure is
// logged with the address, never the key. A wrong Bearer key counts the
// same, and other addresses are not affected.
func TestFailedLoginsAreLimitedAndLogged(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	var (
		mu  sync.Mutex
		now = time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	sink := &logSink{}
	c, err := console.New(console.Config{Driver: d, Ledger: mustLedger(t, d), AdminKeyHash: adminHash(), Clock: clock,
		Logger: slog.New(slog.NewTextHandler(sink, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	const wrongKey = "wrong-key-0123456789-secretish"
	for i := range 10 {
		w := do(t, h, http.MethodPost, "/ui/login", remote, url.Values{"key": {wrongKey}})
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong key %d: status %d", i+1, w.Code)
		}
	}
	w := do(t, h, http.MethodPost, "/ui/login", remote, url.Values{"key": {adminKey}, "next": {"/ui/outbox"}})
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "6" || len(w.Result().Cookies()) != 0 {
		t.Fatalf("eleventh attempt: status %d, Retry-After %q, cookies %v", w.Code, w.Header().Get("Retry-After"), w.Result().Cookies())
	}
	if !strings.Contains(w.Body.String(), `name="key"`) || !strings.Contains(w.Body.String(), "Too many failed logins") ||
		!strings.Contains(w.Body.String(), `name="next" value="/ui/outbox"`) {
		t.Fatalf("429 page: %s", w.Body)
	}
	// The Bearer header is no way around it.
	w = do(t, h, http.MethodGet, "/ui/", "203.0.113.9:50001", nil, "Authorization", "Bearer "+adminKey)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("Bearer from the limited address: %d", w.Code)
	}
	// Another address logs in.
	if w := do(t, h, http.MethodPost, "/ui/login", loopback, url.Values{"key": {adminKey}}); w.Code != http.StatusSeeOther {
		t.Fatalf("another address: %d", w.Code)
	}
	// After one interval, one more attempt; a wrong one closes it again.
	advance(6 * time.Second)
	if w := do(t, h, http.MethodGet, "/ui/", remote, nil, "Authorization", "Bearer "+wrongKey); w.Code != http.StatusUnauthorized {
		t.Fatalf("after 6s, a wrong Bearer key: %d", w.Code)
	}
	if w := do(t, h, http.MethodPost, "/ui/login", remote, url.Values{"key": {adminKey}}); w.Code != http.StatusTooManyRequests {
		t.Fatalf("after a wrong Bearer key: %d", w.Code)
	}
	advance(6 * time.Second)
	if w := do(t, h, http.MethodPost, "/ui/login", remote, url.Values{"key": {adminKey}}); w.Code != http.StatusSeeOther {
		t.Fatalf("right key after waiting: %d", w.Code)
	}

	logs := sink.String()
	if n := strings.Count(logs, "console: login failed"); n != 11 {
		t.Errorf("%d failed logins logged, want 11:\n%s", n, logs)
	}
	if !strings.Contains(logs, "addr=203.0.113.9") || !strings.Contains(logs, "via=bearer") || !strings.Contains(logs, "too many failed logins") {
		t.Errorf("log lacks the address, the Bearer failure or the refusal:\n%s", logs)
	}
	if strings.Contains(logs, wrongKey) || strings.Contains(logs, adminKey) {
		t.Errorf("a key was logged:\n%s", logs)
	}
}

// TestLogoutEndsTheSession: after logging out, the session's cookie is
// refused even when sent again (a copied cookie, a browser that kept it).
func TestLogoutEndsTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", adminHash())
	h := e.Console.Handler()
	login := func() string {
		ck := do(t, h, http.MethodPost, "/ui/login", loopback, url.Values{"key": {adminKey}}).Result().Cookies()[0]
		return ck.Name + "=" + ck.Value
	}
	mine, other := login(), login()
	token := csrfOf(t, do(t, h, http.MethodGet, "/ui/", loopback, nil, "Cookie", mine).Body.String())
	if w := do(t, h, http.MethodPost, "/ui/logout", loopback, url.Values{"csrf": {token}}, "Cookie", mine); w.Code != http.StatusSeeOther {
		t.Fatalf("logout: %d", w.Code)
	}
	if w := do(t, h, http.MethodGet, "/ui/outbox", loopback, nil, "Cookie", mine); w.Code != http.StatusUnauthorized {
		t.Fatalf("the logged-out cookie still opens the console: %d", w.Code)
	}
	w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, url.Values{"id": {"msg-1"}, "csrf": {token}}, "Cookie", mine)
	if w.Code != http.StatusUnauthorized || len(e.Outbox.Redriven()) != 0 {
		t.Fatalf("the logged-out cookie redrives: %d %v", w.Code, e.Outbox.Redriven())
	}
	// Other sessions live on.
	if w := do(t, h, http.MethodGet, "/ui/outbox", loopback, nil, "Cookie", other); w.Code != http.StatusOK {
		t.Fatalf("another session: %d", w.Code)
	}
}

// TestLoginRedirectStaysInTheConsole: next is cleaned and must stay under
// /ui/; anything with a scheme, a host, "//", a backslash or a control
// character sends the operator to /ui/.
func TestLoginRedirectStaysInTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", adminHash())
	h := e.Console.Handler()
	for _, c := range []struct{ next, want string }{
		{"/ui/outbox", "/ui/outbox"},
		{"/ui/accounts?tenant=default&id=wallet&at=3", "/ui/accounts?tenant=default&id=wallet&at=3"},
		{"/ui/transfers/t%201", "/ui/transfers/t%201"},
		{"/ui/transfers/a%2Fb", "/ui/transfers/a%2Fb"},
		{"/ui/./outbox", "/ui/outbox"},
		{"/ui/keys/../outbox", "/ui/outbox"},
		{"", "/ui/"},
		{"/ui", "/ui/"},
		{"/ui/../../evil.com", "/ui/"},
		{"/ui/..", "/ui/"},
		{"/ui/%2e%2e/%2e%2e/evil.com", "/ui/"},
		{"/ui//evil.com", "/ui/"},
		{"//evil.com/ui/", "/ui/"},
		{"/ui/\\evil.com", "/ui/"},
		{"/ui/%5cevil.com", "/ui/"},
		{"https://evil.com/ui/", "/ui/"},
		{"javascript:alert(1)//ui/", "/ui/"},
		{"/ui/\x00", "/ui/"},
		{"/ui/\tx", "/ui/"},
		{"/ui/\x1b[2J", "/ui/"},
		{"/ui/\r\nSet-Cookie: x=1", "/ui/"},
		{"/ui/x%0d%0aSet-Cookie:%20x=1", "/ui/"},
		{"/ui/x?%0d%0a", "/ui/"},
		{"/elsewhere", "/ui/"},
	} {
		w := do(t, h, http.MethodPost, "/ui/login", loopback, url.Values{"key": {adminKey}, "next": {c.next}})
		if got := w.Header().Get("Location"); w.Code != http.StatusSeeOther || got != c.want {
			t.Errorf("next %q: %d to %q, want %q", c.next, w.Code, got, c.want)
		}
	}
	// The login form carries a cleaned next too.
	w := do(t, h, http.MethodGet, "/ui/login?next="+url.QueryEscape("/ui/../../evil.com"), loopback, nil)
	if !strings.Contains(w.Body.String(), `name="next" value="/ui/"`) {
		t.Errorf("login form next:\n%s", w.Body)
	}
}

// TestStaticFilesListNoDirectory: the console's files are served; their
// directory is not listed.
func TestStaticFilesListNoDirectory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	h := e.Console.Handler()
	if w := do(t, h, http.MethodGet, "/ui/static/console.css", loopback, nil); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "tr.reversal") {
		t.Fatalf("console.css: %d", w.Code)
	}
	for _, p := range []string{"/ui/static/", "/ui/static/nope.js"} {
		w := do(t, h, http.MethodGet, p, loopback, nil)
		if w.Code != http.StatusNotFound || strings.Contains(w.Body.String(), `href="console.js"`) {
			t.Errorf("%s: status %d:\n%s", p, w.Code, w.Body)
		}
	}
}
