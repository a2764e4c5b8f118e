package console

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idemhq/idem/internal/inspect"
)

// TestFlowSamplerKeepsAnHour: the ring holds an hour of samples at the
// interval and no more, oldest first.
func TestFlowSamplerKeepsAnHour(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	s := newFlowSampler(10*time.Second, t0)
	for i := range 500 {
		s.add(flowSample{At: t0.Add(time.Duration(i) * 10 * time.Second), OK: true, Pending: int64(i)})
	}
	got := s.samples()
	if len(got) != 361 {
		t.Fatalf("%d samples kept, want 361 (an hour at 10s, both ends)", len(got))
	}
	if got[0].Pending != 139 || got[360].Pending != 499 {
		t.Fatalf("kept samples %d..%d, want 139..499", got[0].Pending, got[360].Pending)
	}
	if !slices.IsSortedFunc(got, func(a, b flowSample) int { return a.At.Compare(b.At) }) {
		t.Fatal("samples are not oldest first")
	}
	// A failed sample does not move the start of the next publish window.
	s.add(flowSample{At: t0.Add(time.Hour * 2)})
	if s.previous() != got[360].At {
		t.Fatalf("previous %v after a failed sample, want %v", s.previous(), got[360].At)
	}
}

// TestFlowChart: points sit in the plot area by time and value, a failed
// sample breaks the line, and the top is a round number.
func TestFlowChart(t *testing.T) {
	now := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	samples := []flowSample{
		{At: now.Add(-2 * time.Hour), OK: true, Pending: 1000}, // older than the chart: left out
		{At: now.Add(-60 * time.Minute), OK: true, Pending: 0},
		{At: now.Add(-30 * time.Minute), OK: true, Pending: 37},
		{At: now.Add(-20 * time.Minute)}, // the database did not answer
		{At: now, OK: true, Pending: 10},
	}
	ch := newChart("c", "backlog", samples, now, countScale,
		chartValue{"pending", "series-a", func(s flowSample) float64 { return float64(s.Pending) }, countText})
	if ch.MaxLabel != "50" {
		t.Errorf("top %q, want 50", ch.MaxLabel)
	}
	pts := ch.Series[0].Points
	if len(pts) != 3 {
		t.Fatalf("%d points, want 3: %+v", len(pts), pts)
	}
	if pts[0].X != float64(ch.Left) || pts[2].X != float64(ch.Right) || pts[1].X != float64(ch.Left+ch.Right)/2 {
		t.Errorf("x %v %v %v, want %d, the middle, %d", pts[0].X, pts[1].X, pts[2].X, ch.Left, ch.Right)
	}
	if pts[0].Y != float64(ch.Bottom) || pts[1].Value != 37 || pts[1].Y >= pts[2].Y {
		t.Errorf("y: %+v", pts)
	}
	if n := strings.Count(ch.Series[0].Path, "M"); n != 2 {
		t.Errorf("path %q: %d moves, want 2 (a gap)", ch.Series[0].Path, n)
	}
	for _, c := range []struct{ in, want float64 }{{0, 1}, {1, 1}, {1.5, 2}, {3, 5}, {7, 10}, {37, 50}, {101, 200}, {999, 1000}} {
		if got := niceCeiling(c.in); got != c.want {
			t.Errorf("niceCeiling(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	for _, c := range []struct{ in, want float64 }{{0, 1}, {0.2, 1}, {3, 5}, {40, 60}, {1620, 1800}, {5000, 7200}, {90000, 172800}} {
		if got := niceSeconds(c.in); got != c.want {
			t.Errorf("niceSeconds(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestFlowGroupDead(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	groups := groupDead([]inspect.DeadLetter{
		{ID: "1", Tenant: "acme", Key: "k2", DeadAt: t0.Add(time.Minute), LastError: "first"},
		{ID: "2", Tenant: "acme", Key: "k1", DeadAt: t0, LastError: "old"},
		{ID: "3", Tenant: "acme", Key: "k2", DeadAt: t0.Add(3 * time.Minute), LastError: "newest"},
		{ID: "4", Tenant: "globex", Key: "k2", DeadAt: t0.Add(2 * time.Minute), LastError: "other tenant"},
	})
	if len(groups) != 3 {
		t.Fatalf("%d groups, want 3: %+v", len(groups), groups)
	}
	g := groups[1]
	if groups[0].Key != "k1" || g.Tenant != "acme" || g.Key != "k2" || len(g.Letters) != 2 ||
		!g.Oldest.Equal(t0.Add(time.Minute)) || !g.Newest.Equal(t0.Add(3*time.Minute)) || g.LastError != "newest" {
		t.Fatalf("groups %+v", groups)
	}
}

// TestStoryJSONHTML: ids become links by what holds them; every string is
// escaped.
func TestStoryJSONHTML(t *testing.T) {
	doc := `{"id":"t1","debit_account_id":"a<1>","credit_account_id":"a2","amount":5,"metadata":{"note":"<script>alert(1)</script>"},` +
		`"reversals":[{"id":"r1","debit_account_id":"a2","credit_account_id":"a<1>"}],"ok":true,"none":null}`
	got := string(jsonHTML([]byte(doc), "acme"))
	for _, want := range []string{
		`&#34;id&#34;: <a class="json-id" href="/ui/transfers/t1?tenant=acme">&#34;t1&#34;</a>,`,
		`<a class="json-id" href="/ui/accounts?id=a%3C1%3E&amp;tenant=acme">&#34;a&lt;1&gt;&#34;</a>`,
		`<a class="json-id" href="/ui/transfers/r1?tenant=acme">&#34;r1&#34;</a>`,
		`&#34;note&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;`,
		`&#34;ok&#34;: true,`, `&#34;none&#34;: null`, "\n  &#34;amount&#34;: 5,\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "<script>") {
		t.Errorf("unescaped script:\n%s", got)
	}
	if got := string(jsonHTML([]byte(`not json <b>`), "acme")); got != "not json &lt;b&gt;" {
		t.Errorf("not JSON: %q", got)
	}
	if got := string(jsonHTML([]byte(`{"id":"a"} {"id":"b"}`), "acme")); strings.Contains(got, "<a") {
		t.Errorf("two documents: %q", got)
	}
}

// TestStoryUUIDAt: the bounds of a millisecond hold the UUIDv7 drawn in it.
func TestStoryUUIDAt(t *testing.T) {
	id := uuid.Must(uuid.NewV7())
	at := time.Unix(id.Time().UnixTime())
	lo, hi := uuidAt(at, false), uuidAt(at, true)
	if !(lo < id.String() && id.String() < hi) {
		t.Fatalf("%s not within %s..%s", id, lo, hi)
	}
	if uuidAt(at.Add(-time.Millisecond), true) >= lo {
		t.Fatal("the bounds of consecutive milliseconds overlap")
	}
}

func TestEventsRelativeTime(t *testing.T) {
	now := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{now.Add(-1500 * time.Microsecond), "2ms ago"},
		{now.Add(-12340 * time.Millisecond), "12.3s ago"},
		{now.Add(-5*time.Minute - 2*time.Second), "5m2s ago"},
		{now.Add(-3*time.Hour - 4*time.Minute - 5*time.Second), "3h4m ago"},
		{now.Add(-50 * time.Hour), "2 days ago"},
		{now.Add(time.Minute), "1m ahead"},
		{now.Add(-2 * time.Hour), "2h ago"},
		{now.Add(-5*time.Minute - 20*time.Second), "5m20s ago"},
		{now.Add(-30 * time.Minute), "30m ago"},
	} {
		if got := relativeTo(now, c.t); got != c.want {
			t.Errorf("relativeTo(%v) = %q, want %q", now.Sub(c.t), got, c.want)
		}
	}
}
