package console_test

import (
	"html"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

var (
	eventRowRE = regexp.MustCompile(`<tr class="event state-([a-z]+)" data-id="([^"]+)">`)
	nextPageRE = regexp.MustCompile(`<a id="next-page" rel="next" href="([^"]+)">`)
)

// eventsOn reads the events page's rows (ids and states, in page order)
// and its next page link ("" when none).
func eventsOn(t *testing.T, page string) (ids, states []string, next string) {
	t.Helper()
	for _, m := range eventRowRE.FindAllStringSubmatch(page, -1) {
		states, ids = append(states, m[1]), append(ids, m[2])
	}
	if m := nextPageRE.FindStringSubmatch(page); m != nil {
		next = html.UnescapeString(m[1])
	}
	return ids, states, next
}

// TestEventsPage filters a tenant's events by type and by key and follows
// the cursor, on both databases: pages come newest first, none repeats
// or is skipped, and another tenant's events never show.
func TestEventsPage(t *testing.T) {
	t.Parallel()
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			s := newService(t, dialect)
			s.call(t, acmeKey, "/v1/accounts", "a1", map[string]any{"id": "a1", "currency": "EUR"}, nil)
			s.call(t, acmeKey, "/v1/accounts", "a2", map[string]any{"id": "a2", "currency": "EUR"}, nil)
			var transfers []ledger.Transfer
			for i := range 7 {
				var tr ledger.Transfer
				s.call(t, acmeKey, "/v1/transfers", "t-"+string(rune('a'+i)), map[string]any{"debit_account_id": "a1",
					"credit_account_id": "a2", "amount": 100 + i, "currency": "EUR"}, &tr)
				transfers = append(transfers, tr)
				if i == 3 {
					s.relayOnce(t, acceptingBroker{}) // the first four published
				}
			}
			s.call(t, globexKey, "/v1/accounts", "g1", map[string]any{"id": "g1", "currency": "EUR"}, nil)

			// Every transfer.created event, three per page, newest first.
			var all, states []string
			next := "/ui/events?tenant=acme&type=transfer.created&limit=3"
			for pages := 0; next != ""; pages++ {
				if pages > 5 {
					t.Fatal("the cursor never ends")
				}
				status, page := get(t, s.URL+next)
				if status != http.StatusOK {
					t.Fatalf("%s: %d", next, status)
				}
				if strings.Contains(page, ">account.created</a>") {
					t.Errorf("the type filter let an account.created through")
				}
				ids, st, n := eventsOn(t, page)
				all, states, next = append(all, ids...), append(states, st...), n
			}
			if len(all) != 7 {
				t.Fatalf("%d transfer.created events over the pages, want 7: %v", len(all), all)
			}
			if !slices.IsSortedFunc(all, func(a, b string) int { return strings.Compare(b, a) }) {
				t.Errorf("events are not newest first: %v", all)
			}
			if sorted := slices.Compact(slices.Clone(all)); len(sorted) != 7 {
				t.Errorf("an event repeats: %v", all)
			}
			// Newest first: the three last transfers are pending, the
			// four first published.
			if want := []string{"pending", "pending", "pending", "published", "published", "published", "published"}; !slices.Equal(states, want) {
				t.Errorf("states %v, want %v", states, want)
			}

			// One key: the events of one transfer.
			_, page := get(t, s.URL+"/ui/events?tenant=acme&key=transfer/"+transfers[2].ID)
			if ids, _, next := eventsOn(t, page); len(ids) != 1 || next != "" {
				t.Errorf("key filter: %v, next %q", ids, next)
			}
			// Another tenant sees only its own.
			_, page = get(t, s.URL+"/ui/events?tenant=globex")
			if ids, _, _ := eventsOn(t, page); len(ids) != 1 || strings.Contains(page, ">transfer.created</a>") {
				t.Errorf("globex's events: %v", ids)
			}
			// Limits are bounded and cursors checked.
			for _, bad := range []string{"limit=0", "limit=201", "limit=x", "before=not-a-cursor"} {
				if status, _ := get(t, s.URL+"/ui/events?tenant=acme&"+bad); status != http.StatusBadRequest {
					t.Errorf("%s: %d, want 400", bad, status)
				}
			}
		})
	}
}
