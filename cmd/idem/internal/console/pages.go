package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/ledger"
)

const (
	// maxParamBytes bounds any one query parameter: ids are at most 128
	// characters and keys 255, so anything longer names nothing.
	maxParamBytes = 1024
	// pageEntries bounds the entries listed for one moment.
	pageEntries = 50
	// pageHolds bounds the open holds an account page lists.
	pageHolds = 20
	// queryTimeout bounds the database work of one page.
	queryTimeout = 10 * time.Second
)

var funcs = template.FuncMap{
	"time": inspect.Time,
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return now.Sub(t).Round(time.Second).String()
	},
	"query": func(pairs ...string) template.URL {
		v := url.Values{}
		for i := 0; i+1 < len(pairs); i += 2 {
			if pairs[i+1] != "" {
				v.Set(pairs[i], pairs[i+1])
			}
		}
		return template.URL(v.Encode())
	},
}

// render executes a page into a buffer first, so a template fault answers
// 500 instead of half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, data map[string]any) {
	c.renderTemplate(w, r, status, page, "layout.html", data)
}

func (c *Console) renderTemplate(w http.ResponseWriter, r *http.Request, status int, page, name string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	if _, ok := data["LoggedIn"]; !ok {
		data["LoggedIn"] = principalFrom(r.Context()) != ""
	}
	if _, ok := data["Now"]; !ok {
		data["Now"] = c.cfg.Clock().UTC() // for the time helpers (present.go)
	}
	data["CSRF"] = c.csrfToken(r)
	data["Session"] = strings.HasPrefix(principalFrom(r.Context()), "session:")
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		c.cfg.Logger.Error("console: render", "page", page, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (c *Console) message(w http.ResponseWriter, r *http.Request, status int, title, text string) {
	c.render(w, r, status, "message", map[string]any{"Title": title, "Text": text})
}

// fail answers a fault: 503 when the database is unavailable (try again),
// 500 otherwise (logged).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	if driver.IsRetryable(err) || errors.Is(err, context.DeadlineExceeded) {
		w.Header().Set("Retry-After", "1")
		c.message(w, r, http.StatusServiceUnavailable, "Database unavailable",
			"The database did not answer. Try again in a moment.")
		return
	}
	c.cfg.Logger.Error("console: request failed", "path", r.URL.Path, "err", err)
	c.message(w, r, http.StatusInternalServerError, "Internal error", "The page could not be built; the error is in the service log.")
}

// params reads the named query parameters, refusing oversized ones.
func (c *Console) params(w http.ResponseWriter, r *http.Request, names ...string) (map[string]string, bool) {
	out := make(map[string]string, len(names))
	q := r.URL.Query()
	for _, n := range names {
		v := strings.TrimSpace(q.Get(n))
		if len(v) > maxParamBytes {
			c.message(w, r, http.StatusBadRequest, "Bad request", n+" is longer than any idem name.")
			return nil, false
		}
		out[n] = v
	}
	return out, true
}

func (c *Console) home(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "home", map[string]any{"Tenant": idem.DefaultTenant})
}

// keyRow is a key record with what its stored answer points at.
type keyRow struct {
	inspect.KeyRecord
	// TransferID is set when the stored answer is a transfer, so the page
	// can link to it (and from there to its accounts).
	TransferID string
	// Body is the stored body pretty-printed with its ids linked, as the
	// story shows it (jsonHTML); a body that is not JSON, as text.
	Body template.HTML
}

func (c *Console) keys(w http.ResponseWriter, r *http.Request) {
	p, ok := c.params(w, r, "tenant", "key", "operation")
	if !ok {
		return
	}
	data := map[string]any{"Tenant": p["tenant"], "Key": p["key"], "Operation": p["operation"], "Now": c.cfg.Clock().UTC()}
	if p["tenant"] == "" {
		data["Tenant"] = idem.DefaultTenant
	}
	if p["key"] != "" {
		ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
		defer cancel()
		recs, err := inspect.Keys(ctx, c.cfg.Driver, c.cfg.Clock(), data["Tenant"].(string), p["operation"], p["key"])
		if err != nil {
			c.fail(w, r, err)
			return
		}
		rows := make([]keyRow, len(recs))
		for i, rec := range recs {
			rows[i] = keyRow{KeyRecord: rec, TransferID: transferIn(rec.Body),
				Body: jsonHTML([]byte(rec.BodyText()), data["Tenant"].(string))}
		}
		data["Searched"], data["Records"] = true, rows
	}
	c.render(w, r, http.StatusOK, "keys", data)
}

// transferIn returns the id of the transfer a stored answer holds, or "".
func transferIn(body json.RawMessage) string {
	var t struct {
		ID              string `json:"id"`
		DebitAccountID  string `json:"debit_account_id"`
		CreditAccountID string `json:"credit_account_id"`
	}
	if json.Unmarshal(body, &t) != nil || t.DebitAccountID == "" || t.CreditAccountID == "" {
		return ""
	}
	return t.ID
}

// entryRow is an entry with its transfer, which links a reversal to its
// original and an original to its reversals.
type entryRow struct {
	ledger.Entry
	Transfer ledger.Transfer
	// Original is the transfer a reversal reverses (when it is one).
	Original *ledger.Transfer
	// Counterparty is the account on the transfer's other side.
	Counterparty string
}

func (c *Console) account(w http.ResponseWriter, r *http.Request) {
	p, ok := c.params(w, r, "tenant", "id", "at", "as_of", "partial")
	if !ok {
		return
	}
	tenant := p["tenant"]
	if tenant == "" {
		tenant = idem.DefaultTenant
	}
	data := map[string]any{"Tenant": tenant, "ID": p["id"], "Now": c.cfg.Clock().UTC(), "AsOfText": p["as_of"]}
	if p["id"] == "" {
		c.render(w, r, http.StatusOK, "account", data)
		return
	}
	var asOf *time.Time // nil: now
	if p["as_of"] != "" {
		t, err := inspect.ParseMoment(p["as_of"])
		if err != nil {
			data["Problem"] = "as of: " + err.Error()
			c.render(w, r, http.StatusBadRequest, "account", data)
			return
		}
		asOf = &t
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	var at, balance int64
	err := inspect.ReadAsOf(ctx, c.cfg.Driver, c.cfg.Ledger, asOf, c.cfg.Driver.BeginSnapshot, func(tx driver.Tx) (err error) {
		at, balance, err = c.accountView(ctx, tx, tenant, p["id"], p["at"], asOf, data)
		return err
	})
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		data["Missing"] = true
		c.render(w, r, http.StatusNotFound, "account", data)
		return
	case err != nil:
		c.fail(w, r, err)
		return
	}
	if p["partial"] == "1" {
		// The slider's script swaps in only the parts that depend on the
		// moment, and moves the chart's cursor itself.
		c.renderTemplate(w, r, http.StatusOK, "account", "partial", data)
		return
	}
	ch, err := c.readChart(ctx, tenant, p["id"], defaultChartLimits)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	ch.setCursor(at, balance)
	data["Chart"] = ch
	c.render(w, r, http.StatusOK, "account", data)
}

// accountView fills data with the account and what the ledger believed at
// the chosen moment: just after entry "at" was recorded (the slider, over
// the whole history; 0 is before the first entry), else at the exact time
// *asOf, else now (nil). It returns the entry the answer is as of (0:
// none) and the balance then, where the chart's cursor goes.
func (c *Console) accountView(ctx context.Context, tx driver.Tx, tenant, id, atText string, asOf *time.Time, data map[string]any) (int64, int64, error) {
	l := c.cfg.Ledger
	acct, err := l.GetAccount(ctx, tx, ledger.AccountQuery{Tenant: tenant, ID: id})
	if err != nil {
		return 0, 0, err
	}
	data["Account"] = acct
	// The open holds now, whatever moment the page shows: what is reserved
	// and still to settle.
	holds, more, err := l.Transfers(ctx, tx, ledger.TransfersQuery{Tenant: tenant, AccountID: id, Status: ledger.StatusPending, Limit: pageHolds})
	if err != nil {
		return 0, 0, err
	}
	data["Holds"], data["MoreHolds"] = holds, more != ""
	newest, _, err := l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: id, Limit: 1})
	if err != nil {
		return 0, 0, err
	}
	if len(newest) == 0 {
		data["Believed"] = ledger.Balance{AccountID: id, AsOf: c.cfg.Clock().UTC()}
		data["Entries"] = []entryRow{}
		return 0, 0, nil
	}
	last := newest[0].Sequence
	if seq, err := strconv.ParseInt(atText, 10, 64); err == nil && atText != "" {
		t, err := c.momentAfter(ctx, tx, tenant, id, min(max(seq, 0), last))
		if err != nil {
			return 0, 0, err
		}
		asOf = &t
	}
	believed, err := l.Balance(ctx, tx, ledger.BalanceQuery{Tenant: tenant, AccountID: id, AsOf: asOf})
	if err != nil {
		return 0, 0, err
	}
	data["Believed"] = believed
	data["AsOf"] = time.Time{} // the page's "now"
	if asOf != nil {
		data["AsOf"] = *asOf
	}
	entries, next, err := l.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: id, AsOf: asOf, Limit: pageEntries})
	if err != nil {
		return 0, 0, err
	}
	data["More"] = next != ""
	rows, err := c.entryRows(ctx, tx, tenant, entries)
	if err != nil {
		return 0, 0, err
	}
	data["Entries"] = rows
	// The slider and the cursor stand where the answer is: after the
	// newest entry recorded by then. Entries recorded in the same
	// microsecond are one moment, so a position between them shows the
	// later one.
	at := int64(0)
	if len(entries) > 0 {
		at = entries[0].Sequence
	}
	last = max(last, at) // "now" in a read-write transaction may see newer
	data["At"], data["MaxSeq"] = at, last
	data["AtLabel"] = momentLabel(at, last, asOf)
	return at, believed.Balance, nil
}

// momentAfter is the moment just after entry seq was recorded, or just
// before the first entry for seq 0.
func (c *Console) momentAfter(ctx context.Context, tx driver.Tx, tenant, id string, seq int64) (time.Time, error) {
	after := strconv.FormatInt(max(seq, 1)+1, 10) // the cursor of the page just below
	es, _, err := c.cfg.Ledger.Entries(ctx, tx, ledger.EntriesQuery{Tenant: tenant, AccountID: id, After: after, Limit: 1})
	if err != nil {
		return time.Time{}, err
	}
	if len(es) == 0 {
		return time.Time{}, fmt.Errorf("console: account %q has no entry %d", id, max(seq, 1))
	}
	if seq == 0 {
		return es[0].CreatedAt.Add(-time.Microsecond), nil
	}
	return es[0].CreatedAt, nil
}

// momentLabel names a position of the slider.
func momentLabel(at, last int64, asOf *time.Time) string {
	switch {
	case at == 0:
		return "before the first entry"
	case asOf == nil:
		return "now, after entry " + Count(at) + " of " + Count(last)
	}
	return "after entry " + Count(at) + " of " + Count(last) + ", as believed at " + inspect.Time(*asOf)
}

// entryRows reads each entry's transfer (with its reversals) and, for a
// reversal, its original, once per transfer.
func (c *Console) entryRows(ctx context.Context, tx driver.Tx, tenant string, entries []ledger.Entry) ([]entryRow, error) {
	cache := map[string]*ledger.Transfer{}
	get := func(id string) (*ledger.Transfer, error) {
		if t, ok := cache[id]; ok {
			return t, nil
		}
		t, err := c.cfg.Ledger.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: id})
		if err != nil {
			return nil, err
		}
		cache[id] = &t
		return &t, nil
	}
	rows := make([]entryRow, len(entries))
	for i, e := range entries {
		t, err := get(e.TransferID)
		if err != nil {
			return nil, err
		}
		row := entryRow{Entry: e, Transfer: *t, Counterparty: t.CreditAccountID}
		if e.Direction == ledger.Credit {
			row.Counterparty = t.DebitAccountID
		}
		if t.ReversesID != "" {
			if row.Original, err = get(t.ReversesID); err != nil {
				return nil, err
			}
		}
		rows[i] = row
	}
	return rows, nil
}

func (c *Console) transfer(w http.ResponseWriter, r *http.Request) {
	p, ok := c.params(w, r, "tenant")
	if !ok {
		return
	}
	tenant := p["tenant"]
	if tenant == "" {
		tenant = idem.DefaultTenant
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	data := map[string]any{"Tenant": tenant, "ID": r.PathValue("id")}
	err := inspect.Snapshot(ctx, c.cfg.Driver, func(tx driver.Tx) error {
		t, err := c.cfg.Ledger.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: r.PathValue("id")})
		if err != nil {
			return err
		}
		data["Transfer"] = t
		var reversed int64
		for _, rv := range t.Reversals {
			reversed += rv.Amount
		}
		data["Reversed"] = reversed
		if t.ReversesID != "" {
			orig, err := c.cfg.Ledger.GetTransfer(ctx, tx, ledger.TransferQuery{Tenant: tenant, ID: t.ReversesID})
			if err != nil {
				return err
			}
			data["Original"] = orig
		}
		return nil
	})
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		data["Missing"] = true
		c.render(w, r, http.StatusNotFound, "transfer", data)
	case err != nil:
		c.fail(w, r, err)
	default:
		c.render(w, r, http.StatusOK, "transfer", data)
	}
}
