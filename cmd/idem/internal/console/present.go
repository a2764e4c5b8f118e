package console

// The presentation helpers every console page uses, so that an id, an
// amount or a time reads the same everywhere. Templates reach them by the
// names in presentFuncs (and "money", which New binds to the configured
// currencies); Go code calls the functions. Each works without JavaScript:
// the script only wires the copy buttons it unhides.
//
//	{{id .TransferID}}                 a long id shortened, full when copied
//	{{idtext .TransferID}}             the same without the copy button (inside a link)
//	{{copy .TransferID}}               the copy button alone
//	{{money .Amount .Currency}}        "12.50 EUR (1250)"
//	{{when $.Now .CreatedAt}}          "2026-11-29T14:02:00.000000Z (3 min ago)"
//	{{relative $.Now .CreatedAt}}      "3 min ago"
//	{{count .Sequence}}                "1,000,000"
//
// A page's data always has Now, the console's clock when the page was built
// (renderTemplate sets it), for when and relative.

import (
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/inspect"
)

// presentFuncs are the helpers by their template names.
var presentFuncs = template.FuncMap{
	"id":       IDHTML,
	"idtext":   IDTextHTML,
	"copy":     CopyButton,
	"short":    ShortID,
	"when":     TimeHTML,
	"relative": Relative,
	"count":    Count,
}

const (
	// idShortLen is how much of a long id is shown: 8 characters tell ids
	// apart on one page (a UUIDv7's first 8 are its time in ms, so ids of
	// one second share them: the full id is always a copy away).
	idShortLen = 8
	// idLongLen is the length from which an id is shortened: up to it the
	// id is shorter than its shortened form would be worth.
	idLongLen = 12
)

// ShortID is id as running text shows it: its first 8 characters and "…"
// when it is longer than 12, else the id itself.
func ShortID(id string) string {
	if utf8.RuneCountInString(id) <= idLongLen {
		return id
	}
	n := 0
	for i := range id {
		if n == idShortLen {
			return id[:i] + "…"
		}
		n++
	}
	return id
}

// IDTextHTML is id in a <code class="id">. A long id is cut to ShortID's
// form by the style sheet only: the full id stays in the page, so selecting
// and copying it, searching the page, or reading it aloud gets all of it,
// and its title shows it on hover.
func IDTextHTML(id string) template.HTML {
	e := template.HTMLEscapeString(id)
	class := "id"
	if utf8.RuneCountInString(id) > idLongLen {
		class = "id id-long"
	}
	return template.HTML(`<code class="` + class + `" title="` + e + `">` + e + `</code>`)
}

// KeyTextHTML is an ordering key (transfer/ID, account/ID) on one line:
// its kind whole and its id cut as IDTextHTML cuts it, so a UUID key
// takes one line of a table rather than four. The whole key stays in the
// page and in the title.
func KeyTextHTML(key string) template.HTML {
	kind, id := "", key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		kind, id = key[:i+1], key[i+1:]
	}
	return template.HTML(`<span class="okey" title="`+template.HTMLEscapeString(key)+`"><code>`+
		template.HTMLEscapeString(kind)+`</code>`) + IDTextHTML(id) + template.HTML(`</span>`)
}

// CopyButton is a button that copies value to the clipboard. It is hidden
// until the script wires it (without JavaScript nothing could copy; the
// value is plain selectable text beside it instead).
func CopyButton(value string) template.HTML {
	e := template.HTMLEscapeString(value)
	return template.HTML(`<button type="button" class="copy" data-copy="` + e + `" hidden>copy<span class="visually-hidden"> ` +
		e + `</span></button>`)
}

// IDHTML is id shortened (IDTextHTML) with its copy button. Inside a link
// use idtext, and copy after the link: a button may not sit in a link.
func IDHTML(id string) template.HTML {
	return template.HTML(`<span class="id-copy">`) + IDTextHTML(id) + CopyButton(id) + template.HTML(`</span>`)
}

// TimeHTML is t in UTC as every console table and the CLI print it (so it
// can be pasted into as_of), in a <time> element, with how long before now
// it was: `2026-11-29T14:02:00.000000Z (3 min ago)`. The zero time is "-".
func TimeHTML(now, t time.Time) template.HTML {
	if t.IsZero() {
		return "-"
	}
	s := inspect.Time(t)
	return template.HTML(`<time datetime="` + s + `">` + s + `</time> <span class="ago">(` +
		template.HTMLEscapeString(Relative(now, t)) + `)</span>`)
}

// Relative says how far t is from now in the largest whole unit, for
// people: "just now" within a second, "3 min ago", "2 h ago", "5 days ago",
// "in 4 s" for a time ahead.
func Relative(now, t time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var n int64
	var unit string
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		n, unit = int64(d/time.Second), "s"
	case d < time.Hour:
		n, unit = int64(d/time.Minute), "min"
	case d < 48*time.Hour:
		n, unit = int64(d/time.Hour), "h"
	default:
		n, unit = int64(d/(24*time.Hour)), "days"
	}
	if future {
		return "in " + strconv.FormatInt(n, 10) + " " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + " ago"
}

// Count writes n in groups of three digits, for counts people read
// (entry 1,000,000).
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
