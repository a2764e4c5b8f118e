package idemhttp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/sealtest"
)

const cardMarker = "4111-MARKER-1111"

// cards is a guarded handler that writes a row and answers a card, whose
// number and cvc a redacting middleware must not store.
type cards struct{ calls atomic.Int64 }

func (c *cards) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.calls.Add(1)
	if _, err := idemhttp.Tx(r.Context()).Exec(r.Context(), `INSERT INTO card_rows (id) VALUES ($1)`, c.calls.Load()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if r.URL.Query().Get("text") != "" {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "card "+cardMarker)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"c1", "card":{"number":"`+cardMarker+`","brand":"visa"},"cvc":"123","items":[{"cvc":"9","sku":"a"},{"sku":"b"}]}`)
}

func cardsEnv(t *testing.T, d driver.Driver, kcfg idem.Config, hcfg idemhttp.Config) (*httptest.Server, *cards) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS card_rows (id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	k, err := idem.New(d, kcfg)
	if err != nil {
		t.Fatal(err)
	}
	hcfg.Keeper = k
	m, err := idemhttp.New(hcfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &cards{}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/cards", m.Wrap(h))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts, h
}

func postCard(t *testing.T, ts *httptest.Server, key, query string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/cards"+query, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idemhttp.HeaderKey, key)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func cardRows(t *testing.T, d driver.Driver) int {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM card_rows`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// RedactFields leaves the named fields out of the stored answer: the first
// answer has them, replays (from the cache and from the database) and the
// row do not; an answer that is not JSON is not stored.
func TestRedactFields(t *testing.T) {
	sealtest.Each(t, func(t *testing.T, d driver.Driver, dir string) {
		hcfg := idemhttp.Config{RedactFields: []string{"card.number", "cvc", "items.cvc"}}
		ts, h := cardsEnv(t, d, idem.Config{}, hcfg)
		status, _, first := postCard(t, ts, "k1", "")
		if status != http.StatusCreated || !strings.Contains(first, cardMarker) || !strings.Contains(first, `"cvc":"123"`) {
			t.Fatalf("first answer %d %s: want it whole", status, first)
		}
		const stored = `{"id":"c1","card":{"brand":"visa"},"items":[{"sku":"a"},{"sku":"b"}]}`
		for i := range 2 { // the cache's replay, then the cache's again
			status, hdr, body := postCard(t, ts, "k1", "")
			if status != http.StatusCreated || body != stored || hdr.Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("replay %d: %d %s; want %s", i, status, body, stored)
			}
		}
		fresh, _ := cardsEnv(t, d, idem.Config{}, hcfg) // another process: from the database
		if status, _, body := postCard(t, fresh, "k1", ""); status != http.StatusCreated || body != stored {
			t.Fatalf("replay from the database: %d %s; want %s", status, body, stored)
		}
		var body []byte
		if err := d.Reader().QueryRow(context.Background(), `SELECT body FROM idem_keys WHERE key = 'k1'`).Scan(&body); err != nil || string(body) != stored {
			t.Fatalf("stored body %s (%v); want %s", body, err, stored)
		}

		status, _, _ = postCard(t, ts, "k2", "?text=1")
		if status != http.StatusInternalServerError {
			t.Fatalf("a text answer under RedactFields: %d; want 500, not stored", status)
		}
		var keys int
		if err := d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM idem_keys WHERE key = 'k2'`).Scan(&keys); err != nil || keys != 0 {
			t.Fatalf("k2 records %d (%v); want none", keys, err)
		}
		if h.calls.Load() != 2 || cardRows(t, d) != 1 {
			t.Fatalf("handler calls %d, rows %d; want 2, 1 (the text answer rolled back)", h.calls.Load(), cardRows(t, d))
		}
		sealtest.Absent(t, d, dir, cardMarker, "idem_keys")
	})
}

func TestRedactFieldsBounds(t *testing.T) {
	d := drivertest.Open(t, "sqlite")
	k, err := idem.New(d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, fields := range [][]string{{""}, {"card..number"}, {".cvc"}, make([]string, idemhttp.MaxRedactFields+1)} {
		if _, err := idemhttp.New(idemhttp.Config{Keeper: k, RedactFields: fields}); err == nil {
			t.Errorf("RedactFields %q accepted", fields)
		}
	}
}

// A replay whose tenant was forgotten answers 410 answer_forgotten, and
// the handler does not run again.
func TestAnswerForgotten(t *testing.T) {
	sealtest.Each(t, func(t *testing.T, d driver.Driver, dir string) {
		s := sealtest.New()
		ts, h := cardsEnv(t, d, idem.Config{Sealer: s}, idemhttp.Config{})
		if status, _, body := postCard(t, ts, "k1", ""); status != http.StatusCreated || !strings.Contains(body, cardMarker) {
			t.Fatalf("first: %d %s", status, body)
		}
		if status, _, body := postCard(t, ts, "k1", ""); status != http.StatusCreated || !strings.Contains(body, cardMarker) {
			t.Fatalf("sealed replay: %d %s", status, body)
		}
		sealtest.Absent(t, d, dir, cardMarker, "idem_keys")
		s.Forget(idem.DefaultTenant)
		status, _, body := postCard(t, ts, "k1", "")
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal([]byte(body), &p)
		if status != http.StatusGone || p.Code != idemhttp.CodeAnswerForgotten || strings.Contains(body, cardMarker) {
			t.Fatalf("replay of a forgotten tenant: %d %s; want 410 answer_forgotten", status, body)
		}
		if h.calls.Load() != 1 || cardRows(t, d) != 1 {
			t.Fatalf("handler calls %d, rows %d; want 1, 1", h.calls.Load(), cardRows(t, d))
		}
	})
}
