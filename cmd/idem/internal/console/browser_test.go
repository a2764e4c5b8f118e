package console_test

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/idemhq/idem/cmd/idem/internal/console"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/outbox"
)

// chromiumPath is Debian's Chromium, which scripts/test installs when
// missing (as root, as in CI). The browser test never skips outside -short:
// without Chromium it fails, saying what to install.
func chromiumPath(t *testing.T) string {
	t.Helper()
	const path = "/usr/bin/chromium"
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: scripts/test installs it when run as root; "+
			"otherwise install Chromium (Debian: apt-get install chromium chromium-driver)", path)
	}
	return path
}

// browser starts a headless Chromium with a fresh profile; it is closed when
// t ends. The context bounds the whole browser session.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	// A bound on a hung browser, not a measure of speed: a loaded 2-core
	// machine has taken most of a minute over the long chart's test.
	ctx, cancelTimeout := context.WithTimeout(context.Background(), 3*time.Minute)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser process to exit
		cancelTimeout()
	})
	return bctx
}

// artifacts is where screenshots go: $IDEM_TEST_ARTIFACTS (or the older
// $IDEM_ARTIFACTS), else the test's temp dir.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := cmp.Or(os.Getenv("IDEM_TEST_ARTIFACTS"), os.Getenv("IDEM_ARTIFACTS"))
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func text(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
	must(t, "text of #"+id, err)
	return strings.TrimSpace(s)
}

// waitJS waits until the JavaScript expression is true.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second)))
	must(t, "wait for "+what, err)
}

func clickAndLoad(t *testing.T, ctx context.Context, what string, sel chromedp.CSS) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(sel)))
	must(t, what, err)
}

// refusingBroker refuses every message, as a broker that rejects a
// payload would: the relay counts the attempts and gives up.
type refusingBroker struct{}

func (refusingBroker) Publish(_ context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = errors.New("broker refused the message")
	}
	return errs
}
func (refusingBroker) Close() error { return nil }

// makeDeadLetter enqueues a message and runs a relay against a broker that
// refuses it until the message is a dead letter; it returns its id.
func makeDeadLetter(t *testing.T, d driver.Driver, ob *outbox.Outbox) string {
	t.Helper()
	ctx := context.Background()
	id := outbox.NewID()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Enqueue(ctx, tx, outbox.Message{ID: id, Type: "transfer.created", Payload: []byte(`{"id":"t1"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(d, outbox.RelayConfig{Publisher: refusingBroker{}, MaxAttempts: 1,
		PollInterval: 10 * time.Millisecond, BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(runCtx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := ob.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Dead == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message did not become a dead letter")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	return id
}

// TestBrowser drives the console in a real headless Chromium against the
// real service on SQLite: log in through the form, look up the key of a
// double charge, travel back before its reversal with the keyboard, and
// redrive a dead letter.
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser suite is long: -short skips it")
	}
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	ob, err := outbox.New(d, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	deadID := makeDeadLetter(t, d, ob)
	e := newEnvWith(t, d, adminHash(), inspect.NewOutboxView(ob))
	s := e.tellStory(t)
	ctx := browser(t)
	shots := artifacts(t)

	// Unauthenticated: the login form. Log in with the admin key.
	must(t, "open console", chromedp.Do(ctx, chromedp.Navigate(e.URL+"/ui/")))
	must(t, "login form", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("key"))))
	screenshot(t, ctx, shots, "01-login")
	must(t, "type key", chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("key"), adminKey)))
	clickAndLoad(t, ctx, "log in", `form[action="/ui/login"] button`)
	must(t, "home", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("home-key"))))

	// The focused element is visibly outlined.
	must(t, "tab", chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab)))
	outline, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.activeElement).outlineStyle`))
	must(t, "outline", err)
	if outline == "none" || outline == "" {
		t.Errorf("the focused element has no visible outline (%q)", outline)
	}

	// Look up the first charge's key.
	must(t, "type key", chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("home-key"), "charge-1")))
	clickAndLoad(t, ctx, "look up key", `form[action="/ui/keys"] button`)
	results := text(t, ctx, "key-results")
	for _, want := range []string{"POST /v1/transfers", "201", s.First.ID, "live"} {
		if !strings.Contains(results, want) {
			t.Errorf("key results lack %q:\n%s", want, results)
		}
	}
	screenshot(t, ctx, shots, "02-key")

	// The wallet now: 2000 funded, charged 500 twice, the duplicate reversed.
	must(t, "open account", chromedp.Do(ctx, chromedp.Navigate(e.URL+"/ui/accounts?tenant=default&id=wallet")))
	waitJS(t, ctx, "enhanced slider", `document.getElementById('time-travel')?.dataset.enhanced === 'true'`)
	if got := text(t, ctx, "balance"); got != "15.00 EUR (1500)" {
		t.Fatalf("balance now %q, want 15.00 EUR (1500)", got)
	}
	screenshot(t, ctx, shots, "03-account-now")

	// One step back with the keyboard: just before the reversal. The
	// script fetches the moment and swaps it in without a page load.
	must(t, "focus slider", chromedp.Do(ctx, chromedp.Focus(chromedp.ID("moment")), chromedp.KeyEvent(kb.ArrowLeft)))
	waitJS(t, ctx, "balance before the reversal", `document.getElementById('balance').textContent === '10.00 EUR (1000)'`)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#entries tr.reversal').length`)); err != nil || n != 0 {
		t.Errorf("reversal rows before the reversal: %d (%v)", n, err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#entries a.reversed-by').length`)); err != nil || n != 1 {
		t.Errorf("the duplicate should link to its (later) reversal: %d links (%v)", n, err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	must(t, "location", err)
	if !strings.Contains(loc, "at=3") {
		t.Errorf("location %q does not keep the moment", loc)
	}
	if label := text(t, ctx, "moment-label"); !strings.Contains(label, "after entry 3") {
		t.Errorf("slider label %q", label)
	}
	screenshot(t, ctx, shots, "04-account-before-reversal")

	// Without the script the slider is a form: submit it.
	must(t, "step back", chromedp.Do(ctx, chromedp.Focus(chromedp.ID("moment")), chromedp.KeyEvent(kb.ArrowLeft)))
	waitJS(t, ctx, "balance before the duplicate", `document.getElementById('balance').textContent === '15.00 EUR (1500)'`)
	must(t, "step back", chromedp.Do(ctx, chromedp.Focus(chromedp.ID("moment")), chromedp.KeyEvent(kb.ArrowLeft)))
	waitJS(t, ctx, "balance before the first charge", `document.getElementById('balance').textContent === '20.00 EUR (2000)'`)
	clickAndLoad(t, ctx, "submit the moment", `#time-travel button`)
	if got := text(t, ctx, "balance"); got != "20.00 EUR (2000)" {
		t.Errorf("submitted moment: balance %q, want 20.00 EUR (2000)", got)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.Contains(loc, "at=1") {
		t.Errorf("submitted location %q", loc)
	}

	// Redrive the real dead letter with the button: the database's outbox
	// holds it live again, for the next relay pass.
	must(t, "open outbox", chromedp.Do(ctx, chromedp.Navigate(e.URL+"/ui/outbox")))
	must(t, "dead letters", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("redrive-"+deadID))))
	screenshot(t, ctx, shots, "05-outbox")
	clickAndLoad(t, ctx, "redrive", chromedp.CSS("#redrive-"+deadID))
	clickAndLoad(t, ctx, "confirm the redrive", chromedp.CSS("#confirm-redrive"))
	must(t, "redriven notice", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("redriven"))))
	st, err := ob.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 0 || st.Unsent < 1 {
		t.Fatalf("after the redrive the outbox holds %d dead and %d unsent, want 0 dead and the message unsent", st.Dead, st.Unsent)
	}
	if got := text(t, ctx, "dead-count"); got != "0" {
		t.Errorf("dead letters after the redrive: %q, want 0", got)
	}
	screenshot(t, ctx, shots, "06-outbox-redriven")

	// Log out with the button. The session ends on the server: its cookie,
	// put back into the browser, opens nothing.
	jar, err := chromedp.Run(ctx, func(ctx context.Context, tgt *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, tgt, network.GetCookies, network.GetCookiesParams{URLs: []string{e.URL + "/ui/"}})
	})
	must(t, "read cookies", err)
	var session *network.Cookie
	for _, c := range jar.Cookies {
		if c.Name == console.SessionCookie {
			session = c
		}
	}
	if session == nil {
		t.Fatalf("no session cookie in %v", jar.Cookies)
	}
	clickAndLoad(t, ctx, "log out", `form.logout button`)
	must(t, "login form after logout", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("key"))))
	must(t, "put the cookie back", chromedp.Do(ctx, func(ctx context.Context, tgt *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tgt, network.SetCookie, network.SetCookieParams{Name: session.Name, Value: session.Value,
			URL: e.URL + "/ui/", Path: "/ui/", HTTPOnly: &session.HTTPOnly})
		return chromedp.Void{}, err
	}))
	must(t, "open outbox again", chromedp.Do(ctx, chromedp.Navigate(e.URL+"/ui/outbox")))
	must(t, "login form for the old cookie", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("key"))))
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#dead-count').length`)); err != nil || n != 0 {
		t.Errorf("the logged-out cookie shows the outbox (%d, %v)", n, err)
	}
}
