package console_test

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/cmd/idem/internal/console"
)

// cssRule is a rule as a style sheet declares it: its nesting depth and
// whether it is an at-rule (@media …) or a style rule.
type cssRule struct {
	Depth int
	At    bool
}

// declaredRules reads the rules a style sheet's text declares, in order:
// every block opened by "{" is one rule, its prelude what precedes it.
// Comments and strings are skipped. A block left open or a "}" closing
// nothing is an error: a browser would silently nest every later rule in
// the open block (or drop what follows), which is how a whole style sheet
// came to apply only on phones.
func declaredRules(css string) ([]cssRule, error) {
	var rules []cssRule
	var prelude strings.Builder
	depth, line := 0, 1
	var opened []int // the line of each open block
	for i := 0; i < len(css); i++ {
		c := css[i]
		switch {
		case c == '\n':
			line++
			prelude.WriteByte(' ')
		case c == '/' && i+1 < len(css) && css[i+1] == '*':
			end := strings.Index(css[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("line %d: comment never closed", line)
			}
			line += strings.Count(css[i:i+2+end+2], "\n")
			i += 2 + end + 1
		case c == '"' || c == '\'':
			end := strings.IndexByte(css[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("line %d: string never closed", line)
			}
			prelude.WriteString(css[i : i+1+end+1])
			i += end + 1
		case c == '{':
			p := strings.TrimSpace(prelude.String())
			if p == "" {
				return nil, fmt.Errorf("line %d: a block without a selector", line)
			}
			rules = append(rules, cssRule{Depth: depth, At: strings.HasPrefix(p, "@")})
			opened = append(opened, line)
			depth++
			prelude.Reset()
		case c == '}':
			if depth == 0 {
				return nil, fmt.Errorf("line %d: } closes no block", line)
			}
			depth--
			opened = opened[:len(opened)-1]
			prelude.Reset()
		case c == ';' && depth == 0:
			prelude.Reset() // an @import or @charset statement
		default:
			prelude.WriteByte(c)
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("the block opened on line %d is never closed: every rule after it is nested in it", opened[len(opened)-1])
	}
	return rules, nil
}

// The parser above finds an unclosed block, a stray "}", and counts nested
// rules as the CSSOM does.
func TestDeclaredRules(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		css   string
		rules []cssRule
		err   string
	}{
		{css: `a { color: red } /* b { } */ @media (max-width: 40rem) { a { x: "}" } b { y: 1 } } c { }`,
			rules: []cssRule{{0, false}, {0, true}, {1, false}, {1, false}, {0, false}}},
		{css: "a { }\n@media (max-width: 40rem) {\n  b { }\nc { }", err: "line 2"},
		{css: "a { } }", err: "closes no block"},
		{css: "a { /* never", err: "comment never closed"},
	} {
		rules, err := declaredRules(c.css)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want one naming %q", c.css, err, c.err)
		case c.err == "" && (err != nil || !slices.Equal(rules, c.rules)):
			t.Errorf("%q: %v %v, want %v", c.css, rules, err, c.rules)
		}
	}
}

// loadedRules is the rules Chromium's CSSOM holds for the style sheet at
// href, as declaredRules lists them.
const loadedRulesJS = `(() => {
  const sheet = [...document.styleSheets].find(s => s.href && s.href.endsWith(%q));
  if (!sheet) return null;
  const out = [];
  const walk = (rules, depth) => { for (const r of rules) {
    out.push({Depth: depth, At: !(r instanceof CSSStyleRule)});
    if (r.cssRules) walk(r.cssRules, depth + 1);
  } };
  walk(sheet.cssRules, 0);
  return out;
})()`

// Every style sheet the console serves parses whole: its braces balance,
// and Chromium loads as many rules, nested as deep, as the file declares
// (a rule the browser cannot parse is dropped from the CSSOM).
func TestBrowserStyleSheetsParse(t *testing.T) {
	t.Parallel()
	sheets, err := console.StyleSheets()
	must(t, "style sheets", err)
	if len(sheets) == 0 {
		t.Fatal("the console serves no style sheet")
	}
	e := newEnv(t, "sqlite", nil)
	ctx := browser(t)
	must(t, "open home", chromedp.Do(ctx, chromedp.Navigate(e.URL+"/ui/")))
	for name, css := range sheets {
		declared, err := declaredRules(css)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		// Each sheet is linked by the layout; one that is not is loaded
		// here, so that it is checked all the same.
		_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(async () => {
		  if ([...document.styleSheets].some(s => s.href && s.href.endsWith('/ui/static/%[1]s'))) return true;
		  const l = document.createElement('link'); l.rel = 'stylesheet'; l.href = '/ui/static/%[1]s';
		  await new Promise((ok, fail) => { l.onload = ok; l.onerror = fail; document.head.append(l); });
		  return true;
		})()`, name), chromedp.EvalAwaitPromise))
		must(t, "link "+name, err)
		loaded := eval[[]cssRule](t, ctx, fmt.Sprintf(loadedRulesJS, "/ui/static/"+name))
		if !slices.Equal(loaded, declared) {
			t.Errorf("%s: the file declares %d rules, Chromium loaded %d: the difference is a rule the browser dropped or nested elsewhere\ndeclared %v\nloaded   %v",
				name, len(declared), len(loaded), declared, loaded)
		}
	}
}

// computed is what TestBrowserConsoleLooksRight reads of the account page.
type computed struct {
	LineFill, LineStroke      string
	LineStrokeWidth           float64
	AxisLabels                []string // the visible axis and tick labels' text
	LabelsInside              bool     // every label within the chart's box
	HeadingFont, CopyFont     float64  // the h1's and its copy button's font size
	HeadingHeight, CopyHeight float64
	IDWidth, IDFullWidth      float64 // a long id's box and its text's whole width
	IDOverflow                string
	HistoryColumns            int // the chart and the figures: side by side (2) or stacked (1)
}

const computedJS = `(() => {
  const svg = document.getElementById('balance-chart'), box = svg.getBoundingClientRect();
  const line = getComputedStyle(svg.querySelector('polyline.line'));
  const labels = [...svg.querySelectorAll('text')].filter(t => getComputedStyle(t).display !== 'none' && t.getBBox().width > 0);
  const inside = labels.every(t => { const r = t.getBoundingClientRect(); return r.left >= box.left - 0.5 && r.right <= box.right + 0.5; });
  const h1 = document.querySelector('h1'), copy = h1.querySelector('button.copy');
  const id = document.querySelector('#entries code.id-long');
  return {
    LineFill: line.fill, LineStroke: line.stroke, LineStrokeWidth: parseFloat(line.strokeWidth),
    AxisLabels: labels.map(t => t.textContent), LabelsInside: inside,
    HeadingFont: parseFloat(getComputedStyle(h1).fontSize), CopyFont: parseFloat(getComputedStyle(copy).fontSize),
    HeadingHeight: h1.getBoundingClientRect().height, CopyHeight: copy.getBoundingClientRect().height,
    IDWidth: id.getBoundingClientRect().width, IDFullWidth: id.scrollWidth, IDOverflow: getComputedStyle(id).textOverflow,
    HistoryColumns: getComputedStyle(document.querySelector('.history')).gridTemplateColumns.split(' ').length,
  };
})()`

// The account page looks as a person expects at a desktop's width and at
// a phone's: the balance is a line (a stroke with no fill), the chart's
// axes are labelled, the heading's copy button is a small button beside
// it, and a long id is cut. At 1280 px the chart and the figures stand
// side by side; at 390 px they are stacked. Screenshots of both widths
// are kept as artifacts; in the desktop one, the plot is mostly
// background: a filled shape would paint a large share of it in the
// line's colour.
func TestBrowserConsoleLooksRight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	e.tellStory(t)
	ctx := browser(t)
	shots := artifacts(t)
	wallet := e.URL + "/ui/accounts?tenant=default&id=wallet"
	for _, w := range []struct {
		width, height, columns int
		mobile                 bool
	}{{1280, 900, 2, false}, {390, 844, 1, true}} {
		opts := []chromedp.EmulateViewportOption{}
		if w.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		must(t, "viewport", chromedp.Do(ctx, chromedp.EmulateViewport(int64(w.width), int64(w.height), opts...), chromedp.Navigate(wallet)))
		waitJS(t, ctx, "enhanced page", `document.getElementById('time-travel')?.dataset.enhanced === 'true'`)
		c := eval[computed](t, ctx, computedJS)
		at := fmt.Sprintf("at %d px", w.width)
		if c.LineFill != "none" || c.LineStroke == "none" || c.LineStroke == "" || c.LineStrokeWidth <= 0 {
			t.Errorf("%s the balance line is fill %q, stroke %q %vpx: want a stroke with no fill", at, c.LineFill, c.LineStroke, c.LineStrokeWidth)
		}
		var axis, ticks int
		for _, l := range c.AxisLabels {
			switch {
			case strings.HasPrefix(l, "#"):
				axis++
			case strings.HasSuffix(l, " EUR"):
				ticks++
			}
		}
		if axis != 2 || ticks < 2 || !c.LabelsInside {
			t.Errorf("%s the chart's labels are %q (inside the chart: %v): want the first and last entries' and at least two balances, whole", at, c.AxisLabels, c.LabelsInside)
		}
		if c.CopyFont > c.HeadingFont/2 || c.CopyHeight >= c.HeadingHeight {
			t.Errorf("%s the heading's copy button is %vpx text, %vpx high, beside a %vpx heading %vpx high: want a small button", at, c.CopyFont, c.CopyHeight, c.HeadingFont, c.HeadingHeight)
		}
		if c.IDOverflow != "ellipsis" || c.IDWidth >= c.IDFullWidth || c.IDWidth > 12*c.HeadingFont/2 {
			t.Errorf("%s a long id is %vpx wide of its %vpx (text-overflow %q): want it cut", at, c.IDWidth, c.IDFullWidth, c.IDOverflow)
		}
		if c.HistoryColumns != w.columns {
			t.Errorf("%s the chart and its figures stand in %d columns, want %d", at, c.HistoryColumns, w.columns)
		}
		screenshot(t, ctx, shots, fmt.Sprintf("looks-account-%d", w.width))
		if w.width != 1280 {
			continue
		}
		// The plot's pixels in the line's colour: a 1.5 px line and four
		// points paint a few percent of it; the filled shape the broken
		// style sheet drew painted a quarter.
		shot, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("#balance-chart")))
		must(t, "screenshot of the chart", err)
		img, err := png.Decode(bytes.NewReader(shot))
		must(t, "decode the chart's screenshot", err)
		paint := c.LineStroke
		if c.LineFill != "none" {
			paint = c.LineFill // what the broken sheet painted
		}
		share := colourShare(t, img, paint)
		t.Logf("%.2f%% of the chart's pixels are the line's colour %s", 100*share, paint)
		if share > 0.04 {
			t.Errorf("%.1f%% of the chart's plot is the line's colour %s: a filled shape, not a line", 100*share, paint)
		}
	}
}

// The events page gives each event one line at a desktop's width: an
// ordering key of a UUID (transfer/…) is cut as an id is, not wrapped
// over four lines; the whole key stays in the page.
func TestBrowserEventKeysOneLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	s := e.tellStory(t)
	ctx := browser(t)
	must(t, "open events", chromedp.Do(ctx, chromedp.Navigate(e.URL+"/ui/events?tenant=default")))
	keys := eval[[]struct {
		Text          string
		Height, Lines float64
	}](t, ctx, `[...document.querySelectorAll('#events a.key')].map(a => ({Text: a.textContent,
	  Height: a.getBoundingClientRect().height, Lines: a.getBoundingClientRect().height / parseFloat(getComputedStyle(a).lineHeight)}))`)
	var uuidKeys int
	for _, k := range keys {
		if len(k.Text) > 30 {
			uuidKeys++
		}
		if k.Lines > 1.5 {
			t.Errorf("key %q takes %.1f lines (%.0f px), want one", k.Text, k.Lines, k.Height)
		}
	}
	if uuidKeys == 0 {
		t.Errorf("no event key holds a whole transfer id: %v", keys)
	}
	if page := eval[string](t, ctx, `document.getElementById('events').textContent`); !strings.Contains(page, "transfer/"+s.Second.ID) {
		t.Errorf("the events page lacks the whole key transfer/%s", s.Second.ID)
	}
}

// colourShare is the share of img's pixels within a small distance of
// the CSS colour rgb(r, g, b).
func colourShare(t *testing.T, img image.Image, css string) float64 {
	t.Helper()
	var r, g, b float64
	if _, err := fmt.Sscanf(css, "rgb(%f, %f, %f)", &r, &g, &b); err != nil {
		t.Fatalf("colour %q: %v", css, err)
	}
	bounds := img.Bounds()
	var near int
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			d := math.Abs(float64(pr>>8)-r) + math.Abs(float64(pg>>8)-g) + math.Abs(float64(pb>>8)-b)
			if d < 60 {
				near++
			}
		}
	}
	return float64(near) / float64(bounds.Dx()*bounds.Dy())
}

// A screenshot of each console page at 1280 px is kept as a test
// artifact ($IDEM_TEST_ARTIFACTS; scripts/test keeps them in
// bin/test-artifacts): a person looks at them, where no assertion could.
func TestBrowserPageScreenshots(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	s := e.tellStory(t)
	ctx := browser(t)
	shots := artifacts(t)
	for _, p := range []struct{ name, path string }{
		{"home", "/ui/"},
		{"login", "/ui/login"},
		{"keys", "/ui/keys?tenant=default"},
		{"account", "/ui/accounts?tenant=default&id=wallet"},
		{"transfer", "/ui/transfers/" + s.Reversal.ID + "?tenant=default"},
		{"story", "/ui/story?tenant=default&q=refund-1"},
		{"outbox", "/ui/outbox"},
		{"events", "/ui/events?tenant=default"},
		{"not-found", "/ui/nothing-here"},
	} {
		must(t, "open "+p.path, chromedp.Do(ctx, chromedp.Navigate(e.URL+p.path)))
		if w := eval[int](t, ctx, `document.documentElement.clientWidth`); w != 1280 {
			t.Fatalf("%s: the page is %d px wide, want 1280", p.name, w)
		}
		screenshot(t, ctx, shots, "page-"+p.name+"-1280")
	}
}
