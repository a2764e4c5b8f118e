package console_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/ledger"
)

// eval runs a JavaScript expression in the page and returns its value.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	must(t, expr, err)
	return v
}

// docImage writes an element's screenshot into docs/images when
// IDEM_UPDATE_DOC_IMAGES=1: the docs' pictures come from this test, never
// from a hand-made capture. Otherwise it is only an artifact.
func docImage(t *testing.T, ctx context.Context, dir, name, sel string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	must(t, "screenshot of "+sel, err)
	path := filepath.Join(dir, name+".png")
	must(t, "write "+path, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
	if os.Getenv("IDEM_UPDATE_DOC_IMAGES") == "1" {
		doc := filepath.Join("..", "..", "..", "..", "docs", "images", name+".png") // the repository's docs
		must(t, "mkdir", os.MkdirAll(filepath.Dir(doc), 0o755))
		must(t, "write "+doc, os.WriteFile(doc, png, 0o644))
		t.Logf("doc image updated: %s", doc)
	}
}

// longHistory gives the tenant's account "wallet-long" 1,452 entries: a
// funding, a random walk of 1,449 charges and top-ups, and two reversals,
// one deep in the history (entry 501) and one among the newest (entry
// 1,402). Its clock steps a minute per transfer, so every entry has a time
// of its own. It returns the reversals.
func longHistory(t *testing.T, d driver.Driver) []ledger.Transfer {
	t.Helper()
	ctx := context.Background()
	base := time.Now().Add(-1500 * time.Minute).Truncate(time.Minute)
	var tick atomic.Int64
	l, err := ledger.New(d, ledger.Config{Clock: func() time.Time { return base.Add(time.Duration(tick.Add(1)) * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(17, 42))
	var posted []ledger.Transfer
	var revs []ledger.Transfer
	post := func(n int) {
		for n > 0 {
			batch := make([]ledger.NewTransfer, min(n, 100))
			for i := range batch {
				from, to := "wallet-long", "shop-long"
				if rng.IntN(2) == 0 {
					from, to = to, from
				}
				batch[i] = ledger.NewTransfer{DebitAccountID: from, CreditAccountID: to, Amount: 100 + rng.Int64N(9900), Currency: "EUR"}
			}
			// One Post per transfer: the transfers of one call share one
			// time, and the chart's moments must be one entry each here.
			must(t, "post", inTx(t, d, func(tx driver.Tx) error {
				for _, nt := range batch {
					ts, err := l.Post(ctx, tx, "default", nt)
					if err != nil {
						return err
					}
					posted = append(posted, ts...)
				}
				return nil
			}))
			n -= len(batch)
		}
	}
	reverse := func(i int) {
		must(t, "reverse", inTx(t, d, func(tx driver.Tx) error {
			r, err := l.Reverse(ctx, tx, "default", ledger.NewReversal{TransferID: posted[i].ID, Reason: "charged twice"})
			revs = append(revs, r)
			return err
		}))
	}
	must(t, "accounts", inTx(t, d, func(tx driver.Tx) error {
		for _, id := range []string{"wallet-long", "shop-long", "bank-long"} {
			if _, err := l.CreateAccount(ctx, tx, "default", ledger.NewAccount{ID: id, Currency: "EUR"}); err != nil {
				return err
			}
		}
		_, err := l.Post(ctx, tx, "default", ledger.NewTransfer{DebitAccountID: "bank-long", CreditAccountID: "wallet-long",
			Amount: 500_000, Currency: "EUR"})
		return err
	}))
	post(499)
	reverse(99)
	post(900)
	reverse(1300)
	post(50)
	return revs
}

func inTx(t *testing.T, d driver.Driver, fn func(tx driver.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit: a no-op
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// pointX is the x of the chart's point for entry seq.
func pointX(t *testing.T, ctx context.Context, seq int) string {
	t.Helper()
	return eval[string](t, ctx, fmt.Sprintf(`document.querySelector('#balance-chart circle.point[data-seq="%d"]').getAttribute('cx')`, seq))
}

func cursorX(t *testing.T, ctx context.Context) string {
	t.Helper()
	return eval[string](t, ctx, `document.getElementById('chart-cursor').getAttribute('x1')`)
}

// TestBrowserAccountChart drives the account page's chart in headless
// Chromium: its points and reversal markers, the slider moving the cursor
// and the figures together (with the script and without), the readout
// under the pointer, the copy buttons, the columns of a long history, and
// a phone's width with nothing overflowing.
func TestBrowserAccountChart(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser suite is long: -short skips it")
	}
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	s := e.tellStory(t)
	revs := longHistory(t, e.D)
	ctx := browser(t)
	shots := artifacts(t)
	wallet := e.URL + "/ui/accounts?tenant=default&id=wallet"

	// The wallet: 1 +2000, 2 −500, 3 −500 (the duplicate), 4 +500 (its
	// reversal). One point per entry, the reversal marked and linked to
	// the duplicate, the cursor on the newest entry.
	must(t, "open wallet", chromedp.Do(ctx, chromedp.Navigate(wallet)))
	waitJS(t, ctx, "enhanced slider", `document.getElementById('time-travel')?.dataset.enhanced === 'true'`)
	if n := eval[int](t, ctx, `document.querySelectorAll('#balance-chart circle.point').length`); n != 4 {
		t.Errorf("%d points, want one per entry: 4", n)
	}
	markers := eval[[]string](t, ctx, `[...document.querySelectorAll('#balance-chart a.reversal-marker')].map(a => a.getAttribute('href') + ' ' + a.dataset.seq)`)
	if want := "/ui/transfers/" + s.Second.ID + "?tenant=default 4"; len(markers) != 1 || markers[0] != want {
		t.Errorf("reversal markers %q, want [%q]", markers, want)
	}
	if x, want := cursorX(t, ctx), pointX(t, ctx, 4); x != want {
		t.Errorf("cursor at x %s, want the newest entry's %s", x, want)
	}
	screenshot(t, ctx, shots, "chart-01-wallet-now")

	// One step back with the keyboard: just before the reversal. The
	// cursor stands on entry 3 and the figures are the ledger's answer as
	// of that moment.
	must(t, "step back", chromedp.Do(ctx, chromedp.Focus(chromedp.ID("moment")), chromedp.KeyEvent(kb.ArrowLeft)))
	waitJS(t, ctx, "figures as of entry 3", `document.getElementById('as-of-figures').dataset.seq === '3'`)
	if x, want := cursorX(t, ctx), pointX(t, ctx, 3); !sameCoord(x, want) {
		t.Errorf("cursor at x %s after stepping back, want entry 3's %s", x, want)
	}
	believed, err := inspect.AccountBalance(context.Background(), e.D, e.Ledger, "default", "wallet", &s.Second.CreatedAt)
	must(t, "balance as of the duplicate", err)
	if got, want := text(t, ctx, "balance"), fmt.Sprintf("%.2f EUR (%d)", float64(believed.Believed.Balance)/100, believed.Believed.Balance); got != want || want != "10.00 EUR (1000)" {
		t.Errorf("figures beside the cursor: balance %q, want the ledger's %q (10.00 EUR (1000))", got, want)
	}
	dotY := eval[string](t, ctx, `document.getElementById('chart-cursor-dot').getAttribute('cy')`)
	if pointY := eval[string](t, ctx, `document.querySelector('#balance-chart circle.point[data-seq="3"]').getAttribute('cy')`); !sameCoord(dotY, pointY) {
		t.Errorf("cursor dot at y %s, want entry 3's balance at %s", dotY, pointY)
	}
	screenshot(t, ctx, shots, "chart-02-wallet-before-reversal")

	// The readout under the pointer: move it over entry 2.
	// In view first: a pointer outside the viewport reaches nothing.
	at := eval[[]float64](t, ctx, `(() => { const p = document.querySelector('#balance-chart circle.point[data-seq="2"]'); p.scrollIntoView({block: "center"}); const r = p.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()`)
	// A move the page gets while it is still busy (a loaded machine) can
	// be lost: move again, a little aside, until the readout follows.
	for i := 0; ; i++ {
		must(t, "hover", chromedp.Do(ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, at[0]+float64(i%2)/2, at[1])))
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('chart-readout').textContent.startsWith('entry 2 ·')`,
			chromedp.WithPollingTimeout(2*time.Second)))
		if err == nil {
			break
		}
		if i == 9 {
			must(t, "wait for readout of entry 2", err)
		}
	}
	if got := text(t, ctx, "chart-readout"); !strings.Contains(got, "balance 15.00 EUR (1500)") {
		t.Errorf("readout %q lacks entry 2's balance", got)
	}

	// The copy buttons appear with the script, and copy.
	if n := eval[int](t, ctx, `[...document.querySelectorAll('button.copy')].filter(b => !b.hidden).length`); n == 0 {
		t.Error("no copy button is shown with the script")
	}
	must(t, "copy", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#entries button.copy`))))
	waitJS(t, ctx, "copied", `document.querySelector('#entries button.copy').firstChild.nodeValue === 'copied'`)

	// Without JavaScript: the ids are whole in the page, the copy buttons
	// stay hidden, and the slider is a form that puts the cursor and the
	// figures at the moment chosen.
	_, err = chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
	must(t, "disable scripts", err)
	must(t, "open wallet", chromedp.Do(ctx, chromedp.Navigate(wallet)))
	if n := eval[int](t, ctx, `[...document.querySelectorAll('button.copy')].filter(b => b.offsetParent !== null).length`); n != 0 {
		t.Errorf("%d copy buttons shown without the script", n)
	}
	if ids := eval[string](t, ctx, `document.getElementById('entries').textContent`); !strings.Contains(ids, s.Reversal.ID) {
		t.Errorf("the entries do not hold the reversal's whole id %s", s.Reversal.ID)
	}
	must(t, "step back", chromedp.Do(ctx, chromedp.Focus(chromedp.ID("moment")), chromedp.KeyEvent(kb.ArrowLeft)))
	clickAndLoad(t, ctx, "submit the moment", `#time-travel button`)
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.Contains(loc, "at=3") {
		t.Errorf("submitted location %q", loc)
	}
	if x, want := cursorX(t, ctx), pointX(t, ctx, 3); x != want {
		t.Errorf("without the script the cursor is at x %s, want entry 3's %s", x, want)
	}
	if got := text(t, ctx, "balance"); got != "10.00 EUR (1000)" {
		t.Errorf("without the script the balance is %q, want 10.00 EUR (1000)", got)
	}
	_, err = chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false})
	must(t, "enable scripts", err)

	// A long history: 1,452 entries. The newest 200 are points; the 1,252
	// before them are columns of 3 entries (418 columns); both reversals
	// are marked, each linked to the transfer it reverses.
	must(t, "open the long wallet", chromedp.Do(ctx, chromedp.Navigate(e.URL+"/ui/accounts?tenant=default&id=wallet-long&at=1380")))
	waitJS(t, ctx, "enhanced slider", `document.getElementById('time-travel')?.dataset.enhanced === 'true'`)
	for sel, want := range map[string]int{"#balance-chart circle.point": 200, "#balance-chart line.column": 418, "#balance-chart a.reversal-marker": 2} {
		if n := eval[int](t, ctx, `document.querySelectorAll('`+sel+`').length`); n != want {
			t.Errorf("%s: %d, want %d", sel, n, want)
		}
	}
	links := eval[[]string](t, ctx, `[...document.querySelectorAll('#balance-chart a.reversal-marker')].map(a => a.dataset.seq + ' ' + a.getAttribute('href'))`)
	wantLinks := []string{"501 /ui/transfers/" + revs[0].ReversesID + "?tenant=default", "1402 /ui/transfers/" + revs[1].ReversesID + "?tenant=default"}
	if strings.Join(links, ",") != strings.Join(wantLinks, ",") {
		t.Errorf("markers %q, want %q", links, wantLinks)
	}
	// The cursor before the newer reversal, among the points, and the
	// figures the ledger's as of then.
	if x, want := cursorX(t, ctx), pointX(t, ctx, 1380); x != want {
		t.Errorf("cursor at x %s, want entry 1,380's %s", x, want)
	}
	es, _, err := e.Ledger.Entries(context.Background(), e.D.Reader(), ledger.EntriesQuery{Tenant: "default", AccountID: "wallet-long", After: "1381", Limit: 1})
	must(t, "entry 1380", err)
	if got, want := text(t, ctx, "balance"), strconv.FormatInt(es[0].Balance, 10); !strings.HasSuffix(got, "("+want+")") {
		t.Errorf("balance as of entry 1,380: %q, want (%s)", got, want)
	}
	docImage(t, ctx, shots, "console-account-chart", ".history")

	// A phone, 390 px wide: one column, nothing wider than the screen.
	must(t, "phone", chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)))
	for _, u := range []string{wallet + "&at=3", e.URL + "/ui/accounts?tenant=default&id=wallet-long", e.URL + "/ui/transfers/" + s.Reversal.ID} {
		must(t, "open "+u, chromedp.Do(ctx, chromedp.Navigate(u)))
		widths := eval[[]float64](t, ctx, `[document.documentElement.scrollWidth, document.documentElement.clientWidth]`)
		if widths[0] > widths[1] {
			t.Errorf("%s: %v px wide on a %v px screen", u, widths[0], widths[1])
		}
		wide := eval[[]string](t, ctx, `[...document.querySelectorAll('main *')].filter(el => el.getBoundingClientRect().right > innerWidth + 0.5 && !el.closest('.visually-hidden, table.cards thead') && el.getClientRects().length > 0).map(el => el.tagName + '.' + (typeof el.className === 'string' ? el.className : el.className.baseVal))`)
		if len(wide) > 0 {
			t.Errorf("%s: elements past the screen's right edge: %v", u, wide)
		}
	}
	must(t, "open wallet on the phone", chromedp.Do(ctx, chromedp.Navigate(wallet+"&at=3")))
	docImage(t, ctx, shots, "console-account-phone", ".history")
}

// sameCoord compares two coordinates to the chart's precision: the script
// computes the dot's with all decimals, the server writes one.
func sameCoord(a, b string) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x-y < 0.1 && y-x < 0.1
}
