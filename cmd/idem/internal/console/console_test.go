package console_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/internal/drivertest"
)

// do sends one request straight to the console handler from remoteAddr,
// for host consoleHost unless a "Host" header is given.
func do(t *testing.T, h http.Handler, method, target, remoteAddr string, form url.Values, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, target, body)
	r.RemoteAddr = remoteAddr
	r.Host = consoleHost
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			r.Host = header[i+1]
			continue
		}
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

const (
	loopback    = "127.0.0.1:50000"
	remote      = "203.0.113.9:50000"
	consoleHost = "localhost:8080"
)

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in page:\n%s", body)
	}
	return m[1]
}

func TestAuthWithoutAdminKeyIsLoopbackOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	h := e.Console.Handler()
	cases := []struct {
		name, path, addr string
		want             int
	}{
		{"remote page", "/ui/", remote, http.StatusForbidden},
		{"remote static", "/ui/static/console.css", remote, http.StatusForbidden},
		{"remote outbox", "/ui/outbox", remote, http.StatusForbidden},
		{"ipv6 remote", "/ui/", "[2001:db8::1]:5000", http.StatusForbidden},
		{"loopback", "/ui/", loopback, http.StatusOK},
		{"ipv6 loopback", "/ui/outbox", "[::1]:5000", http.StatusOK},
		{"loopback unknown page", "/ui/nope", loopback, http.StatusNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := do(t, h, http.MethodGet, c.path, c.addr, nil)
			if w.Code != c.want {
				t.Fatalf("status %d, want %d: %s", w.Code, c.want, w.Body)
			}
			if w.Header().Get("Content-Security-Policy") == "" || w.Header().Get("X-Frame-Options") != "DENY" {
				t.Fatalf("security headers missing: %v", w.Header())
			}
		})
	}
}

func TestAuthWithAdminKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", adminHash())
	h := e.Console.Handler()
	cases := []struct {
		name   string
		header []string
		addr   string
		want   int
	}{
		{"no credentials", nil, loopback, http.StatusUnauthorized},
		{"wrong key", []string{"Authorization", "Bearer wrong-key-0123456789"}, loopback, http.StatusUnauthorized},
		{"key of another scheme", []string{"Authorization", "Basic " + adminKey}, loopback, http.StatusUnauthorized},
		{"right key", []string{"Authorization", "Bearer " + adminKey}, loopback, http.StatusOK},
		{"right key from afar", []string{"Authorization", "Bearer " + adminKey}, remote, http.StatusOK},
		{"forged cookie", []string{"Cookie", console.SessionCookie + "=v1.9999999999.bm9uY2U.c2ln"}, loopback, http.StatusUnauthorized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := do(t, h, http.MethodGet, "/ui/outbox", c.addr, nil, c.header...)
			if w.Code != c.want {
				t.Fatalf("status %d, want %d: %s", w.Code, c.want, w.Body)
			}
			if w.Code == http.StatusUnauthorized && !strings.Contains(w.Body.String(), `name="key"`) {
				t.Fatalf("401 without the login form: %s", w.Body)
			}
			if w.Code == http.StatusOK && !strings.Contains(w.Body.String(), "msg-1") {
				t.Fatalf("outbox page without its dead letters: %s", w.Body)
			}
		})
	}
}

func TestLoginSessionAndLogout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", adminHash())
	h := e.Console.Handler()

	w := do(t, h, http.MethodPost, "/ui/login", remote, url.Values{"key": {"not-the-key-0123456"}, "next": {"/ui/outbox"}})
	if w.Code != http.StatusUnauthorized || len(w.Result().Cookies()) != 0 {
		t.Fatalf("wrong key: status %d, cookies %v", w.Code, w.Result().Cookies())
	}

	// The login sets a session cookie and sends the operator where they
	// were going — never off the console.
	w = do(t, h, http.MethodPost, "/ui/login", remote, url.Values{"key": {adminKey}, "next": {"/ui/outbox"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/outbox" {
		t.Fatalf("login: status %d, location %q", w.Code, w.Header().Get("Location"))
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v", cookies)
	}
	ck := cookies[0]
	// Secure over plain HTTP too: with an admin key the console answers
	// other machines, through a TLS proxy the service does not see.
	if ck.Name != console.SessionCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || !ck.Secure || ck.Path != "/ui/" {
		t.Fatalf("session cookie attributes: %+v", ck)
	}
	if strings.Contains(ck.Value, adminKey) || strings.Contains(ck.Value, "0123456789abcdef") {
		t.Fatal("the session cookie holds the admin key")
	}
	cookie := ck.Name + "=" + ck.Value

	w = do(t, h, http.MethodGet, "/ui/outbox", remote, nil, "Cookie", cookie)
	if w.Code != http.StatusOK {
		t.Fatalf("with session: %d", w.Code)
	}
	// A tampered session is refused.
	w = do(t, h, http.MethodGet, "/ui/outbox", remote, nil, "Cookie", cookie[:len(cookie)-2]+"xx")
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("tampered session: %d", w.Code)
	}
	// An open redirect through next is refused.
	w = do(t, h, http.MethodPost, "/ui/login", remote, url.Values{"key": {adminKey}, "next": {"//evil.example/"}})
	if w.Header().Get("Location") != "/ui/" {
		t.Fatalf("next //evil.example/ redirected to %q", w.Header().Get("Location"))
	}

	// Over TLS the cookie is Secure.
	r := httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader(url.Values{"key": {adminKey}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.TLS = &tls.ConnectionState{}
	tw := httptest.NewRecorder()
	h.ServeHTTP(tw, r)
	if c := tw.Result().Cookies(); len(c) != 1 || !c[0].Secure {
		t.Fatalf("TLS login cookie not Secure: %v", c)
	}

	// Logging out needs the CSRF token and clears the cookie.
	page := do(t, h, http.MethodGet, "/ui/", remote, nil, "Cookie", cookie).Body.String()
	w = do(t, h, http.MethodPost, "/ui/logout", remote, url.Values{"csrf": {csrfOf(t, page)}}, "Cookie", cookie)
	if w.Code != http.StatusSeeOther || len(w.Result().Cookies()) != 1 || w.Result().Cookies()[0].MaxAge >= 0 || !w.Result().Cookies()[0].Secure {
		t.Fatalf("logout: %d %v", w.Code, w.Result().Cookies())
	}
}

func TestSessionExpires(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	now := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	c, err := console.New(console.Config{Driver: d, Ledger: mustLedger(t, d), AdminKeyHash: adminHash(),
		Clock: func() time.Time { return clock() }, SessionTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w := do(t, c.Handler(), http.MethodPost, "/ui/login", loopback, url.Values{"key": {adminKey}})
	ck := w.Result().Cookies()[0]
	cookie := ck.Name + "=" + ck.Value
	if w := do(t, c.Handler(), http.MethodGet, "/ui/", loopback, nil, "Cookie", cookie); w.Code != http.StatusOK {
		t.Fatalf("fresh session: %d", w.Code)
	}
	clock = func() time.Time { return now.Add(time.Hour + time.Second) }
	if w := do(t, c.Handler(), http.MethodGet, "/ui/", loopback, nil, "Cookie", cookie); w.Code != http.StatusUnauthorized {
		t.Fatalf("expired session: %d", w.Code)
	}
}

func TestRedriveNeedsCSRF(t *testing.T) {
	t.Parallel()
	// The page shows the oldest pending message's age: on the console's
	// clock, stopped at the fake outbox's now, it is exactly 1m30s however
	// long the test takes (on the wall clock a loaded machine showed 1m31s).
	d := drivertest.Open(t, "sqlite")
	now := time.Now()
	fo := newFakeOutbox(now)
	c, err := console.New(console.Config{Driver: d, Ledger: mustLedger(t, d), AdminKeyHash: adminHash(), Outbox: fo,
		Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	login := func() string {
		ck := do(t, h, http.MethodPost, "/ui/login", loopback, url.Values{"key": {adminKey}}).Result().Cookies()[0]
		return ck.Name + "=" + ck.Value
	}
	alice, bob := login(), login()
	aliceToken := csrfOf(t, do(t, h, http.MethodGet, "/ui/outbox", loopback, nil, "Cookie", alice).Body.String())

	cases := []struct {
		name   string
		form   url.Values
		cookie string
		want   int
	}{
		{"no token", url.Values{"id": {"msg-1"}}, alice, http.StatusForbidden},
		{"garbage token", url.Values{"id": {"msg-1"}, "csrf": {"AAAA"}}, alice, http.StatusForbidden},
		{"another session's token", url.Values{"id": {"msg-1"}, "csrf": {aliceToken}}, bob, http.StatusForbidden},
		{"no session", url.Values{"id": {"msg-1"}, "csrf": {aliceToken}}, "", http.StatusUnauthorized},
	}
	for _, c := range cases {
		w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, c.form, "Cookie", c.cookie)
		if w.Code != c.want {
			t.Fatalf("%s: status %d, want %d", c.name, w.Code, c.want)
		}
	}
	if got := fo.Redriven(); len(got) != 0 {
		t.Fatalf("refused posts redrove %v", got)
	}

	// Without confirm=1 the post answers the confirmation page and
	// redrives nothing.
	w := do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, url.Values{"id": {"msg-1"}, "csrf": {aliceToken}}, "Cookie", alice)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `name="confirm" value="1"`) || len(fo.Redriven()) != 0 {
		t.Fatalf("unconfirmed redrive: %d, redriven %v: %s", w.Code, fo.Redriven(), w.Body)
	}
	w = do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, url.Values{"id": {"msg-1"}, "csrf": {aliceToken}, "confirm": {"1"}}, "Cookie", alice)
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/ui/outbox?redriven=msg-1") {
		t.Fatalf("redrive: %d %q %s", w.Code, w.Header().Get("Location"), w.Body)
	}
	if got := fo.Redriven(); len(got) != 1 || got[0] != "msg-1" {
		t.Fatalf("redriven %v, want [msg-1]", got)
	}
	// Again: it is no longer a dead letter.
	w = do(t, h, http.MethodPost, "/ui/outbox/redrive", loopback, url.Values{"id": {"msg-1"}, "csrf": {aliceToken}, "confirm": {"1"}}, "Cookie", alice)
	if w.Code != http.StatusNotFound {
		t.Fatalf("second redrive: %d", w.Code)
	}
	page := do(t, h, http.MethodGet, "/ui/outbox", loopback, nil, "Cookie", alice).Body.String()
	for _, want := range []string{`id="pending">7<`, "1m30s old", `id="dead-count">1<`, "msg-2"} {
		if !strings.Contains(page, want) {
			t.Errorf("outbox page lacks %q", want)
		}
	}
}

// balanceRE reads the stored integer beside the balance shown in major
// units: "15.00 EUR (1500)".
var balanceRE = regexp.MustCompile(`id="balance">-?[\d.]+ EUR \((-?\d+)\)<`)

func balanceOn(t *testing.T, page string) int64 {
	t.Helper()
	m := balanceRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no balance on page:\n%s", page)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

func get(t *testing.T, rawURL string) (int, string) {
	t.Helper()
	resp, err := client.Get(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAccountTimeTravel reads the wallet's history without JavaScript, on
// both databases: each slider position shows the balance after that entry.
func TestAccountTimeTravel(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, dialect, nil)
			s := e.tellStory(t)
			base := e.URL + "/ui/accounts?tenant=default&id=wallet"
			for _, c := range []struct {
				at   string
				want int64
			}{{"", 1500}, {"4", 1500}, {"3", 1000}, {"2", 1500}, {"1", 2000}, {"0", 0}, {"99", 1500}, {"-5", 0}} {
				status, page := get(t, base+"&at="+c.at)
				if status != http.StatusOK {
					t.Fatalf("at %q: %d", c.at, status)
				}
				if got := balanceOn(t, page); got != c.want {
					t.Errorf("at %q: balance %d, want %d", c.at, got, c.want)
				}
			}
			// Before the reversal: the duplicate shows as reversed later,
			// and its reversal is not listed yet.
			_, page := get(t, base+"&at=3")
			if !strings.Contains(page, "recorded after this moment") || strings.Contains(page, `class="original"`) {
				t.Errorf("before the reversal the page should show it only as later:\n%s", page)
			}
			// Now: the reversal links to its original, and the original to it.
			_, page = get(t, base)
			if !strings.Contains(page, `class="original" href="/ui/transfers/`+s.Second.ID) ||
				!strings.Contains(page, `class="reversed-by" href="/ui/transfers/`+s.Reversal.ID) {
				t.Errorf("reversal links missing:\n%s", page)
			}
			// An exact time is the newest moment at or before it.
			_, page = get(t, base+"&as_of="+url.QueryEscape(s.Second.CreatedAt.Format(time.RFC3339Nano)))
			if got := balanceOn(t, page); got != 1000 {
				t.Errorf("as of the duplicate: balance %d, want 1000", got)
			}
			// Without a zone it is UTC, as for idem ledger balance --as-of.
			_, page = get(t, base+"&as_of="+url.QueryEscape(s.Second.CreatedAt.UTC().Format("2006-01-02T15:04:05.999999")))
			if got := balanceOn(t, page); got != 1000 {
				t.Errorf("as of the duplicate without a zone: balance %d, want 1000", got)
			}
			// The partial view is what the slider's script swaps in.
			_, page = get(t, base+"&at=2&partial=1")
			if strings.Contains(page, "<html") || balanceOn(t, page) != 1500 {
				t.Errorf("partial view:\n%s", page)
			}
			// The transfer page of the original lists its reversal.
			_, page = get(t, e.URL+"/ui/transfers/"+s.Second.ID+"?tenant=default")
			if !strings.Contains(page, s.Reversal.ID) || !strings.Contains(page, "5.00 EUR (500) of 5.00 EUR (500) reversed") ||
				!strings.Contains(page, `id="amount">5.00 EUR (500)<`) {
				t.Errorf("transfer page:\n%s", page)
			}
			if status, _ := get(t, base+"&as_of=yesterday"); status != http.StatusBadRequest {
				t.Errorf("bad as_of: %d", status)
			}
			if status, _ := get(t, e.URL+"/ui/accounts?tenant=other&id=wallet"); status != http.StatusNotFound {
				t.Errorf("another tenant's account: %d", status)
			}
		})
	}
}

func TestKeyLookupPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	s := e.tellStory(t)
	status, page := get(t, e.URL+"/ui/keys?tenant=default&key=charge-1")
	if status != http.StatusOK {
		t.Fatal(status)
	}
	for _, want := range []string{"POST /v1/transfers", `class="status">201<`, "live", "/ui/transfers/" + s.First.ID} {
		if !strings.Contains(page, want) {
			t.Errorf("key page lacks %q:\n%s", want, page)
		}
	}
	_, page = get(t, e.URL+"/ui/keys?tenant=other&key=charge-1")
	if !strings.Contains(page, `id="no-records"`) {
		t.Errorf("another tenant sees the key:\n%s", page)
	}
	if status, _ := get(t, e.URL+"/ui/keys?key="+strings.Repeat("k", 2000)); status != http.StatusBadRequest {
		t.Errorf("oversized key: %d", status)
	}
}

// An account page shows its pending amounts and open holds; a hold's page
// tells its story, reserved then posted.
func TestAccountHolds(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, dialect, nil)
			e.tellStory(t)
			e.post(t, "/v1/transfers", "hold-1", map[string]any{"id": "h1", "debit_account_id": "wallet", "credit_account_id": "merchant",
				"amount": 300, "currency": "EUR", "pending": true, "timeout_seconds": 3600}, nil)
			e.post(t, "/v1/transfers", "hold-2", map[string]any{"id": "h2", "debit_account_id": "wallet", "credit_account_id": "merchant",
				"amount": 200, "currency": "EUR", "pending": true}, nil)
			e.post(t, "/v1/transfers/h2/post", "capture-2", map[string]any{"id": "p2", "amount": 150}, nil)
			_, page := get(t, e.URL+"/ui/accounts?tenant=default&id=wallet")
			for _, want := range []string{`id="debits-pending-now">3.00 EUR (300)<`, `id="available-now">10.50 EUR (1050)<`,
				`href="/ui/transfers/h1?tenant=default"`, `id="debits-pending">3.00 EUR (300)<`} {
				if !strings.Contains(page, want) {
					t.Errorf("account page lacks %s:\n%s", want, page)
				}
			}
			holds, _, _ := strings.Cut(page[strings.Index(page, `id="holds"`)+1:], "</table>")
			if strings.Contains(holds, `href="/ui/transfers/h2?tenant=default"`) || !strings.Contains(holds, "/ui/transfers/h1?") {
				t.Errorf("the posted hold h2 is listed as open:\n%s", page)
			}
			_, page = get(t, e.URL+"/ui/transfers/h2?tenant=default")
			if !strings.Contains(page, `id="status">posted<`) || !strings.Contains(page, `class="settled-by" href="/ui/transfers/p2?tenant=default"`) {
				t.Errorf("hold page:\n%s", page)
			}
		})
	}
}
