package console_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/color/palette"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// pageShots is where this file's screenshots go: $IDEM_TEST_ARTIFACTS,
// else $IDEM_ARTIFACTS (TestBrowser's), else the test's temp dir. With
// IDEM_UPDATE_DOC_IMAGES=1 the pages docs/operations-console.md shows are
// also written to docs/images/.
func pageShots(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("IDEM_TEST_ARTIFACTS")
	if dir == "" {
		return artifacts(t)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// docShot saves a screenshot of the page as a test artifact and, with
// IDEM_UPDATE_DOC_IMAGES=1, keeps it in docs for writeDocImages.
func docShot(t *testing.T, ctx context.Context, dir, name string, docs map[string][]byte) {
	t.Helper()
	screenshot(t, ctx, dir, name)
	if os.Getenv("IDEM_UPDATE_DOC_IMAGES") != "1" {
		return
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, "doc screenshot "+name, err)
	docs[name] = shot
}

// writeDocImages writes the screenshots docShot kept as docs/images/NAME.png.
// The pages are flat colours: 256 of them keep them legible at a fraction
// of the size the repository would otherwise carry.
func writeDocImages(t *testing.T, docs map[string][]byte) {
	t.Helper()
	for name, shot := range docs {
		img, err := png.Decode(bytes.NewReader(shot))
		must(t, "decode "+name, err)
		b := img.Bounds()
		small := image.NewPaletted(b, palette.Plan9)
		index := map[color.Color]uint8{}
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := img.At(x, y)
				i, ok := index[c]
				if !ok {
					i = uint8(small.Palette.Index(c))
					index[c] = i
				}
				small.SetColorIndex(x, y, i)
			}
		}
		var buf bytes.Buffer
		must(t, "encode "+name, (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, small))
		path := filepath.Join("..", "..", "..", "..", "docs", "images", name+".png") // the repository's docs
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("doc image: %s (%d bytes)", path, buf.Len())
	}
}

func evalInt(t *testing.T, ctx context.Context, what, expr string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
	must(t, what, err)
	return n
}

// fitsPhone checks that the page needs no sideways scrolling at a phone's
// width (tables scroll inside their own box), then restores the desktop
// width.
func fitsPhone(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	must(t, "phone width", chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Reload()))
	if over := evalInt(t, ctx, "page width", `document.documentElement.scrollWidth - window.innerWidth`); over > 0 {
		wide, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('body *')].filter(e => !e.closest('.scroll') && e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 8).map(e => e.tagName + '#' + e.id + '.' + e.className)`))
		t.Errorf("%s is %dpx wider than a 390px phone: %v", name, over, wide)
	}
	must(t, "desktop width", chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Reload()))
}

// TestBrowserStoryFlowEvents drives the story, outbox flow and events pages
// in a real headless Chromium: a charge's story from the home page's form
// with every timeline row, the outbox's chart after a broker outage and a
// group of dead letters redriven through the confirmation page, and the
// events page's filter and next page.
func TestBrowserStoryFlowEvents(t *testing.T) {
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
	a, b, _ := f.makeDeadLetters(t)
	// An outage of 24 minutes, sampled every 3: the backlog grows, then
	// the broker is back and the relay drains it.
	broker := &switchableBroker{}
	ctx := context.Background()
	for i := range 8 {
		f.enqueue(t, "order/"+string(rune('a'+i)), "order/"+string(rune('a'+i))+"/2")
		tries := 0 // the relay tries, and fails as a whole
		runRelay(t, f.D, broker, 0, func() bool { tries++; return tries > 3 })
		f.Clock.Add(3 * time.Minute)
		f.Console.SampleOutbox(ctx)
	}
	broker.set(true)
	runRelay(t, f.D, broker, 0, func() bool { return f.stats(t).Unsent == 0 })
	f.Clock.Add(3 * time.Minute)
	f.Console.SampleOutbox(ctx)

	bctx := browser(t)
	shots := pageShots(t)
	docs := map[string][]byte{}
	defer writeDocImages(t, docs)

	// The story, from the home page's form.
	must(t, "home", chromedp.Do(bctx, chromedp.Navigate(s.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("home-story-q"))))
	must(t, "tenant", chromedp.Do(bctx, chromedp.SetValue(chromedp.ID("home-story-tenant"), "acme")))
	must(t, "key", chromedp.Do(bctx, chromedp.SendKeys(chromedp.ID("home-story-q"), "charge-1")))
	clickAndLoad(t, bctx, "tell the story", `form[action="/ui/story"] button`)
	must(t, "timeline", chromedp.Do(bctx, chromedp.WaitVisible(chromedp.ID("timeline"))))
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#timeline li.tl')].map(li => [...li.classList].find(c => c.startsWith('tl-')))`))
	must(t, "timeline rows", err)
	want := "tl-arrival tl-answer tl-ledger tl-event tl-replay tl-reversal tl-arrival tl-answer tl-ledger tl-event"
	if strings.Join(rows, " ") != want {
		t.Errorf("timeline rows %v, want %s", rows, want)
	}
	if got := text(t, bctx, "story-matched"); !strings.Contains(got, "Idempotency-Key of POST /v1/transfers") {
		t.Errorf("the page says it matched %q", got)
	}
	reversal := text(t, bctx, "reversal-"+c.Reversal.ID)
	for _, w := range []string{"refund-1", "transfer.reversed", "pending", "20.00 EUR (2000)"} {
		if !strings.Contains(reversal, w) {
			t.Errorf("the reversal row lacks %q:\n%s", w, reversal)
		}
	}
	if n := evalInt(t, bctx, "published events", `document.querySelectorAll('#timeline .tl-event .state-published').length`); n != 1 {
		t.Errorf("%d published events shown, want the charge's", n)
	}
	if n := evalInt(t, bctx, "copy buttons", `[...document.querySelectorAll('button.copy')].filter(b => !b.hidden).length`); n == 0 {
		t.Error("the script showed no copy button")
	}
	docShot(t, bctx, shots, "story", docs)
	fitsPhone(t, bctx, "the story page")
	// An id in the stored answer links to its page, and that page back to
	// the story.
	clickAndLoad(t, bctx, "transfer link", chromedp.CSS(`#timeline .tl-answer a.json-id[href^="/ui/transfers/`+c.Charge.ID+`"]`))
	must(t, "transfer page", chromedp.Do(bctx, chromedp.WaitVisible(chromedp.ID("amount"))))
	clickAndLoad(t, bctx, "back to the story", `a.story`)
	must(t, "timeline again", chromedp.Do(bctx, chromedp.WaitVisible(chromedp.ID("timeline"))))
	if got := text(t, bctx, "story-matched"); !strings.Contains(got, "the transfer id") {
		t.Errorf("from the transfer page the story says it matched %q", got)
	}

	// The outbox flow: the outage's backlog on the chart.
	must(t, "outbox", chromedp.Do(bctx, chromedp.Navigate(f.URL+"/ui/outbox"), chromedp.WaitVisible(chromedp.ID("chart-backlog"))))
	points, err := chromedp.Run(bctx, chromedp.Evaluate[[]float64](
		`[...document.querySelectorAll('#chart-backlog circle')].map(c => Number(c.dataset.value))`))
	must(t, "chart points", err)
	peak := 0.0
	for _, p := range points {
		peak = max(peak, p)
	}
	if len(points) != 9 || peak != 16 || points[len(points)-1] != 0 {
		t.Errorf("backlog points %v, want 9 rising to 16, the last 0", points)
	}
	if note := text(t, bctx, "flow-note"); !strings.Contains(note, "survives nothing") {
		t.Errorf("flow note %q", note)
	}
	if n := evalInt(t, bctx, "groups", `document.querySelectorAll('#dead-groups tbody.dead-group').length`); n != 2 {
		t.Errorf("%d dead-letter groups, want 2", n)
	}
	docShot(t, bctx, shots, "outbox-flow", docs)
	fitsPhone(t, bctx, "the outbox page")

	// Redrive the group of two through its confirmation page.
	clickAndLoad(t, bctx, "redrive group", `tbody.dead-group[data-key="order/7"] button.redrive-group`)
	must(t, "confirmation", chromedp.Do(bctx, chromedp.WaitVisible(chromedp.ID("confirm-redrive"))))
	if n := evalInt(t, bctx, "letters to redrive", `document.querySelectorAll('#redrive-letters tbody tr').length`); n != 2 {
		t.Errorf("the confirmation lists %d letters, want 2", n)
	}
	if f.live(t, a) || f.live(t, b) {
		t.Fatal("the confirmation page redrove")
	}
	screenshot(t, bctx, shots, "redrive-confirmation")
	clickAndLoad(t, bctx, "confirm", chromedp.CSS("#confirm-redrive"))
	must(t, "redriven notice", chromedp.Do(bctx, chromedp.WaitVisible(chromedp.ID("redriven-group"))))
	if !f.live(t, a) || !f.live(t, b) {
		t.Fatalf("after the confirmed redrive the rows are not live: %v %v", f.live(t, a), f.live(t, b))
	}

	// The events page: filter by type, two a page, and follow the cursor.
	must(t, "events", chromedp.Do(bctx, chromedp.Navigate(s.URL+"/ui/events?tenant=acme"), chromedp.WaitVisible(chromedp.ID("events"))))
	docShot(t, bctx, shots, "events", docs)
	fitsPhone(t, bctx, "the events page")
	must(t, "type", chromedp.Do(bctx, chromedp.SendKeys(chromedp.ID("events-type"), "transfer.created")))
	must(t, "limit", chromedp.Do(bctx, chromedp.SetValue(chromedp.ID("events-limit"), "2")))
	clickAndLoad(t, bctx, "filter", `form[action="/ui/events"] button`)
	first, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#events tbody tr')].map(r => r.dataset.id)`))
	must(t, "first page", err)
	types, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#events a.type')].map(a => a.textContent)`))
	must(t, "types", err)
	if len(first) != 2 || strings.Join(types, ",") != "transfer.created,transfer.created" {
		t.Fatalf("first page %v of types %v", first, types)
	}
	clickAndLoad(t, bctx, "next page", `#next-page`)
	second, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#events tbody tr')].map(r => r.dataset.id)`))
	must(t, "second page", err)
	if len(second) != 2 || second[0] >= first[1] {
		t.Errorf("second page %v does not follow %v", second, first)
	}
	// An event's id opens its story.
	clickAndLoad(t, bctx, "event story", `#events tbody tr a[href^="/ui/story"]`)
	must(t, "event's story", chromedp.Do(bctx, chromedp.WaitVisible(chromedp.ID("timeline"))))
	if n := evalInt(t, bctx, "focused event", `document.querySelectorAll('#timeline li.focus').length`); n != 1 {
		t.Errorf("the event's story highlights %d events, want 1", n)
	}
}
