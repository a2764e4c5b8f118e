package console

import (
	"cmp"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/inspect"
)

// The events page (/ui/events): a tenant's outbox events, newest first,
// with their publish state, filtered by type and ordering key.

const (
	// eventsDefaultLimit and eventsMaxLimit bound one page of events.
	eventsDefaultLimit = 50
	eventsMaxLimit     = 200
	// eventsScan bounds the rows one page examines: a filter that matches
	// little still reads at most this many, and the next page goes on
	// from where it stopped.
	eventsScan = 10000
)

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	p, ok := c.params(w, r, "tenant", "type", "key", "before", "limit")
	if !ok {
		return
	}
	tenant := cmp.Or(p["tenant"], idem.DefaultTenant)
	now := c.cfg.Clock().UTC()
	data := map[string]any{"Tenant": tenant, "Type": p["type"], "Key": p["key"], "Before": p["before"], "Now": now,
		"Limit": eventsDefaultLimit, "MaxLimit": eventsMaxLimit}
	limit := eventsDefaultLimit
	if p["limit"] != "" {
		n, err := strconv.Atoi(p["limit"])
		if err != nil || n < 1 || n > eventsMaxLimit {
			data["Problem"] = fmt.Sprintf("limit: give a number of events from 1 to %d.", eventsMaxLimit)
			c.render(w, r, http.StatusBadRequest, "events", data)
			return
		}
		limit = n
		data["Limit"] = n
	}
	before := ""
	if p["before"] != "" {
		id, err := uuid.Parse(p["before"])
		if err != nil {
			data["Problem"] = "before: not a cursor this page gave."
			c.render(w, r, http.StatusBadRequest, "events", data)
			return
		}
		before = id.String()
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	d := c.cfg.Driver
	b, err := d.OutboxBrowse(ctx, d.Reader(), &driver.OutboxBrowseParams{Tenant: tenant, Type: p["type"], Key: p["key"],
		BeforeID: before, Limit: limit, ScanLimit: eventsScan})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	rows := make([]storyEvent, len(b.Rows))
	for i, row := range b.Rows {
		rows[i] = eventOf(row, tenant)
	}
	data["Events"] = rows
	// The next page starts below the last event shown, or, when the
	// examined rows ran out before the page filled, below the last row
	// examined: there may be older matches.
	switch {
	case len(rows) == limit:
		data["Next"] = rows[len(rows)-1].ID
	case b.Scanned >= eventsScan:
		data["Next"], data["ScanStopped"] = b.Lowest, b.Scanned
	}
	c.render(w, r, http.StatusOK, "events", data)
}

// Presentation helpers of the story, events and outbox pages.

// utcWithHint shows a time in UTC, as everywhere in idem, with how long
// ago (or ahead) it is.
func utcWithHint(now, t time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	s := inspect.Time(t)
	return template.HTML(`<time datetime="` + s + `">` + s + `</time> <span class="hint">(` + relativeTo(now, t) + `)</span>`)
}

// relativeTo says how far t is from now, to the unit that matters.
func relativeTo(now, t time.Time) string {
	d := now.Sub(t)
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, " ahead"
	}
	return humanDuration(d) + suffix
}

// humanDuration rounds a duration to what a person reads at a glance:
// milliseconds under a second, then seconds, minutes, hours, days.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < 48*time.Hour:
		unit := time.Second
		if d >= time.Hour {
			unit = time.Minute
		}
		s := d.Round(unit).String() // "5m2s", "30m0s", "3h4m0s", "2h0m0s"
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	default:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + " days"
	}
}

// storyFuncs are the template functions of the story, events and outbox
// pages.
var storyFuncs = template.FuncMap{
	"copyButton":  CopyButton,
	"keyText":     KeyTextHTML,
	"utcWithHint": utcWithHint,
	"duration":    humanDuration,
	"add1":        func(i int) int { return i + 1 },
}
