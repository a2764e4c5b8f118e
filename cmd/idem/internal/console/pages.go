package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/ledger"
)

const (
	// maxParamBytes bounds any one query parameter: ids are at most 128
	// characters and keys 255, so anything longer names nothing.
	maxParamBytes = 1024
	// historyLimit bounds the entries the time slider spans: the account's
	// newest changes. Older moments are reachable with the exact-time form.
	historyLimit = 1000
	// pageEntries bounds the entries listed for one moment.
	pageEntries = 50
	// deadLetterPage bounds the dead letters listed.
	deadLetterPage = 100
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
	c.render(w, r, http.StatusOK, "home", map[string]any{"Tenant": "default"})
}

// keyRow is a key record with what its stored answer points at.
type keyRow struct {
	inspect.KeyRecord
	// TransferID is set when the stored answer is a transfer, so the page
	// can link to it (and from there to its accounts).
	TransferID string
}

func (c *Console) keys(w http.ResponseWriter, r *http.Request) {
	p, ok := c.params(w, r, "tenant", "key", "operation")
	if !ok {
		return
	}
	data := map[string]any{"Tenant": p["tenant"], "Key": p["key"], "Operation": p["operation"], "Now": c.cfg.Clock().UTC()}
	if p["tenant"] == "" {
		data["Tenant"] = "default"
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
			rows[i] = keyRow{KeyRecord: rec, TransferID: transferIn(rec.Body)}
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

// moment is one position of the time slider: just after the entry with
// this sequence was recorded (sequence 0: before the first entry).
type moment struct {
	Seq int64
	At  time.Time
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
		tenant = "default"
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
	err := inspect.ReadAsOf(ctx, c.cfg.Driver, c.cfg.Driver.BeginSnapshot, func(tx driver.Tx) error {
		return c.accountView(ctx, tx, tenant, p["id"], p["at"], asOf, data)
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
		// The slider's script swaps in only the part that depends on the
		// moment.
		c.renderTemplate(w, r, http.StatusOK, "account", "view", data)
		return
	}
	c.render(w, r, http.StatusOK, "account", data)
}

// accountView fills data with the account, the slider's moments, and the
// balance and entries as believed at the chosen moment: the slider position
// "at" (an entry sequence), else the exact time *asOf, else now (nil).
func (c *Console) accountView(ctx context.Context, tx driver.Tx, tenant, id, atText string, asOf *time.Time, data map[string]any) error {
	l := c.cfg.Ledger
	acct, err := l.GetAccount(ctx, tx, tenant, id)
	if err != nil {
		return err
	}
	data["Account"] = acct
	history, _, err := l.Entries(ctx, tx, tenant, id, ledger.EntriesQuery{Limit: historyLimit})
	if err != nil {
		return err
	}
	// Moments run oldest to newest; sequence 0 ("before any entry") is a
	// position only when the whole history fits.
	var moments []moment
	for i := len(history) - 1; i >= 0; i-- {
		moments = append(moments, moment{Seq: history[i].Sequence, At: history[i].CreatedAt})
	}
	if len(moments) > 0 && moments[0].Seq == 1 {
		moments = append([]moment{{Seq: 0, At: moments[0].At.Add(-time.Microsecond)}}, moments...)
	}
	data["Moments"] = moments
	if len(moments) == 0 {
		data["Believed"] = ledger.Balance{AccountID: id, AsOf: c.cfg.Clock().UTC()}
		data["Entries"] = []entryRow{}
		return nil
	}
	first, last := moments[0], moments[len(moments)-1]
	data["MinSeq"], data["MaxSeq"] = first.Seq, last.Seq
	at := last.Seq
	if seq, err := strconv.ParseInt(atText, 10, 64); err == nil && atText != "" {
		at = min(max(seq, first.Seq), last.Seq)
		for _, m := range moments {
			if m.Seq == at {
				asOf = &m.At
			}
		}
	} else if asOf != nil {
		// The slider shows the newest moment at or before the exact time.
		at = first.Seq
		for _, m := range moments {
			if !m.At.After(*asOf) {
				at = m.Seq
			}
		}
	}
	data["At"] = at
	times := make(map[string]string, len(moments))
	for _, m := range moments {
		times[strconv.FormatInt(m.Seq, 10)] = momentLabel(m)
		if m.Seq == at {
			data["AtLabel"] = momentLabel(m)
		}
	}
	timesJSON, _ := json.Marshal(times) // strings always encode
	data["Times"] = string(timesJSON)

	believed, err := l.Balance(ctx, tx, tenant, id, asOf)
	if err != nil {
		return err
	}
	data["Believed"] = believed
	data["AsOf"] = time.Time{} // the page's "now"
	if asOf != nil {
		data["AsOf"] = *asOf
	}
	entries, next, err := l.Entries(ctx, tx, tenant, id, ledger.EntriesQuery{AsOf: asOf, Limit: pageEntries})
	if err != nil {
		return err
	}
	data["More"] = next != ""
	rows, err := c.entryRows(ctx, tx, tenant, entries)
	if err != nil {
		return err
	}
	data["Entries"] = rows
	return nil
}

func momentLabel(m moment) string {
	if m.Seq == 0 {
		return "before the first entry (" + inspect.Time(m.At) + ")"
	}
	return "after entry " + strconv.FormatInt(m.Seq, 10) + " at " + inspect.Time(m.At)
}

// entryRows reads each entry's transfer (with its reversals) and, for a
// reversal, its original, once per transfer.
func (c *Console) entryRows(ctx context.Context, tx driver.Tx, tenant string, entries []ledger.Entry) ([]entryRow, error) {
	cache := map[string]*ledger.Transfer{}
	get := func(id string) (*ledger.Transfer, error) {
		if t, ok := cache[id]; ok {
			return t, nil
		}
		t, err := c.cfg.Ledger.GetTransfer(ctx, tx, tenant, id)
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
		tenant = "default"
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	data := map[string]any{"Tenant": tenant, "ID": r.PathValue("id")}
	err := inspect.Snapshot(ctx, c.cfg.Driver, func(tx driver.Tx) error {
		t, err := c.cfg.Ledger.GetTransfer(ctx, tx, tenant, r.PathValue("id"))
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
			orig, err := c.cfg.Ledger.GetTransfer(ctx, tx, tenant, t.ReversesID)
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

func (c *Console) outbox(w http.ResponseWriter, r *http.Request) {
	now := c.cfg.Clock().UTC()
	data := map[string]any{"Now": now, "Available": c.cfg.Outbox != nil, "Redriven": r.URL.Query().Get("redriven")}
	if c.cfg.Outbox == nil {
		c.render(w, r, http.StatusOK, "outbox", data)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	stats, err := c.cfg.Outbox.Stats(ctx)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	dead, err := c.cfg.Outbox.ListDead(ctx, deadLetterPage)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data["Stats"], data["OldestAge"], data["Dead"] = stats, stats.OldestAge(now).Round(time.Second), dead
	c.render(w, r, http.StatusOK, "outbox", data)
}

func (c *Console) redrive(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Outbox == nil {
		c.message(w, r, http.StatusNotFound, "Outbox not available", "This service has no outbox to redrive.")
		return
	}
	id := r.PostForm.Get("id")
	if id == "" || len(id) > maxParamBytes {
		c.message(w, r, http.StatusBadRequest, "Bad request", "Name the dead letter to redrive.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	err := c.cfg.Outbox.Redrive(ctx, id)
	switch {
	case errors.Is(err, inspect.ErrDeadLetterNotFound):
		c.message(w, r, http.StatusNotFound, "No such dead letter",
			"Message "+id+" is not a dead letter: it may have been redriven already.")
	case err != nil:
		c.fail(w, r, err)
	default:
		c.cfg.Logger.Info("console: dead letter redriven", "id", id)
		http.Redirect(w, r, "/ui/outbox?"+url.Values{"redriven": {id}}.Encode(), http.StatusSeeOther)
	}
}
