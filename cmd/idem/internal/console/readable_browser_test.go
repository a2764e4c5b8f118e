package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// minLabelPx is the smallest size a chart's label may be drawn at on the
// screen, in CSS pixels.
const minLabelPx = 11

// labelSizesJS lists every visible text of the page's charts with the size
// it is drawn at: its font size times the scale its chart is drawn at
// (an SVG's user units shrink with the picture).
const labelSizesJS = `[...document.querySelectorAll('svg text')].filter(el => {
  const st = getComputedStyle(el);
  return st.display !== 'none' && st.visibility !== 'hidden' && el.getClientRects().length > 0 && el.getBBox().width > 0;
}).map(el => {
  const m = el.getScreenCTM();
  const size = parseFloat(getComputedStyle(el).fontSize) * Math.hypot(m.a, m.b);
  return size.toFixed(1) + ' ' + el.textContent.trim();
})`

// labelsCutJS lists the chart labels that run past their picture's edges,
// which clip them.
const labelsCutJS = `[...document.querySelectorAll('svg text')].filter(el => {
  const st = getComputedStyle(el);
  if (st.display === 'none' || st.visibility === 'hidden' || el.getClientRects().length === 0) return false;
  const r = el.getBoundingClientRect(), box = el.ownerSVGElement.getBoundingClientRect();
  return r.width > 0 && (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5);
}).map(el => el.textContent.trim())`

// cutJS lists the visible elements a reader cannot read whole: past the
// viewport's right edge, or past the right edge of a box that clips them.
// Inside a box that scrolls sideways only a table's cells may run past its
// edge (the reader scrolls the table); any other text (a caption, a
// paragraph) must fit.
const cutJS = `(() => {
  const cut = [];
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\s+/).join('.') : '');
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('.visually-hidden, table.cards thead, svg') && el.tagName !== 'svg') continue;
    if (el.getClientRects().length === 0) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    let edge = innerWidth, scrolled = false;
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if (ox === 'visible') continue;
      if (ox === 'auto' || ox === 'scroll') { scrolled = true; }
      edge = Math.min(edge, a.getBoundingClientRect().right);
      break;
    }
    if (r.right <= Math.min(edge, innerWidth) + 0.5) continue;
    if (scrolled && el.closest('td, th, tr, thead, tbody, tfoot') && !el.closest('caption')) continue;
    if (scrolled && el.tagName === 'TABLE') continue;
    cut.push(name(el) + ' right ' + r.right.toFixed(0) + ' > ' + Math.min(edge, innerWidth).toFixed(0) + ': ' + (el.textContent || '').trim().slice(0, 40));
  }
  return cut.slice(0, 12);
})()`

// TestBrowserReadableAtEveryWidth opens the console's pages with charts and
// wide tables at a desktop's width (1280 px) and a phone's (390 px), saves
// a screenshot of each, and requires what a reader needs at both: every
// chart label drawn at least minLabelPx tall on the screen, nothing cut off
// (cutJS, labelsCutJS), and no sideways scrolling of the page. It also checks the
// account chart's first entry label stands at entry 1's point, and that
// the keys page shows the stored body pretty-printed, as the story does.
func TestBrowserReadableAtEveryWidth(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser suite is long: -short skips it")
	}
	t.Parallel()
	s := newService(t, "sqlite")
	c := s.chargeTwice(t, acmeKey)
	for _, k := range []string{"charge-2", "charge-3", "charge-4"} {
		s.call(t, acmeKey, "/v1/transfers", k, map[string]any{"debit_account_id": "wallet", "credit_account_id": "merchant",
			"amount": 125, "currency": "EUR"}, nil)
	}
	f := newFlowEnv(t, "sqlite")
	f.makeDeadLetters(t)
	broker := &switchableBroker{}
	for i := range 6 {
		f.enqueue(t, "order/"+string(rune('a'+i)), "order/"+string(rune('a'+i))+"/2")
		tries := 0
		runRelay(t, f.D, broker, 0, func() bool { tries++; return tries > 3 })
		f.Clock.Add(3 * time.Minute)
		f.Console.SampleOutbox(context.Background())
	}

	pages := []struct {
		name, url, ready string
	}{
		{"account", s.URL + "/ui/accounts?tenant=acme&id=wallet", "balance-chart"},
		{"outbox", f.URL + "/ui/outbox", "chart-backlog"},
		{"events", s.URL + "/ui/events?tenant=acme", "events"},
		{"story", s.URL + "/ui/story?tenant=acme&q=charge-1", "timeline"},
		{"keys", s.URL + "/ui/keys?tenant=acme&key=charge-1", "key-results"},
	}
	ctx := browser(t)
	shots := pageShots(t)
	for _, width := range []int64{1280, 390} {
		if width == 390 {
			must(t, "phone", chromedp.Do(ctx, chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile)))
		} else {
			must(t, "desktop", chromedp.Do(ctx, chromedp.EmulateViewport(width, 900)))
		}
		for _, p := range pages {
			what := fmt.Sprintf("%s at %d px", p.name, width)
			must(t, "open "+what, chromedp.Do(ctx, chromedp.Navigate(p.url), chromedp.WaitVisible(chromedp.ID(p.ready))))
			screenshot(t, ctx, shots, fmt.Sprintf("readable-%s-%d", p.name, width))
			for _, l := range eval[[]string](t, ctx, labelSizesJS) {
				var size float64
				fmt.Sscanf(l, "%g", &size)
				if size < minLabelPx {
					t.Errorf("%s: chart label drawn %s px tall (at least %d wanted)", what, strings.Replace(l, " ", " px: ", 1), minLabelPx)
				}
			}
			if cut := eval[[]string](t, ctx, labelsCutJS); len(cut) > 0 {
				t.Errorf("%s: chart labels cut by the chart's edge: %q", what, cut)
			}
			if cut := eval[[]string](t, ctx, cutJS); len(cut) > 0 {
				t.Errorf("%s: cut off: %v", what, cut)
			}
			if over := eval[int](t, ctx, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); over > 0 {
				t.Errorf("%s: the page scrolls %d px sideways", what, over)
			}
		}
	}
	// Checked at the phone's width, as the reader sees it there too.

	// "#1" names entry 1: its label starts at entry 1's point, not at the
	// opening balance before it.
	must(t, "account", chromedp.Do(ctx, chromedp.Navigate(pages[0].url), chromedp.WaitVisible(chromedp.ID("balance-chart"))))
	first := eval[[]string](t, ctx, `[document.querySelector('#balance-chart text.axis').getAttribute('x'), document.querySelector('#balance-chart circle.point[data-seq="1"]').getAttribute('cx')]`)
	if !sameCoord(first[0], first[1]) {
		t.Errorf(`the "#1" label stands at x %s; entry 1's point at %s`, first[0], first[1])
	}

	// The keys page pretty-prints the stored body, as the story does: one
	// field a line, its ids linked.
	must(t, "keys", chromedp.Do(ctx, chromedp.Navigate(pages[4].url), chromedp.WaitVisible(chromedp.ID("key-results"))))
	body := eval[string](t, ctx, `document.querySelector('#key-results pre.body').textContent`)
	if lines := strings.Count(body, "\n"); lines < 5 || !strings.Contains(body, `"id": "`+c.Charge.ID+`"`) {
		t.Errorf("the stored body is not pretty-printed (%d lines):\n%s", lines, body)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#key-results pre.body a.json-id').length`); n == 0 {
		t.Error("the stored body links none of its ids")
	}
}
