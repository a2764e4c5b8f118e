package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(m)) }

// The cold replay's least program answers what idem stored under the
// key: its status, headers and body, marked a replay; a key with nothing
// stored is 404, a request without a key 400.
func TestStored(t *testing.T) {
	ctx := t.Context()
	url, schema := testpg.URL(t), testpg.Schema(t)
	d, err := postgres.Open(ctx, postgres.Config{URL: url, SearchPath: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := d.Pool().Exec(ctx, `INSERT INTO idem_keys (scope, operation, key, fingerprint, status, header, body, created_at, expires_at)
		VALUES ('default', 'POST /v1/transfers', 'k1', '\x00', 201, '{"Location":["/v1/transfers/t1"]}', '{"id":"t1"}', $1, $2)`,
		now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	h := storedHandler(pool, "default", "POST /v1/transfers")

	for _, c := range []struct {
		key, wantBody      string
		status             int
		location, replayed string
	}{
		{"k1", `{"id":"t1"}`, http.StatusCreated, "/v1/transfers/t1", "true"},
		{"k2", "no answer stored for k2\n", http.StatusNotFound, "", ""},
		{"", "bad request: no Idempotency-Key\n", http.StatusBadRequest, "", ""},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/transfers", strings.NewReader(`{"amount":1}`))
		if c.key != "" {
			r.Header.Set("Idempotency-Key", c.key)
		}
		w := httptest.NewRecorder()
		h(w, r)
		if w.Code != c.status || w.Body.String() != c.wantBody || w.Header().Get("Location") != c.location ||
			w.Header().Get("Idempotent-Replayed") != c.replayed {
			t.Errorf("key %q: %d %q Location %q replayed %q, want %d %q %q %q", c.key, w.Code, w.Body, w.Header().Get("Location"),
				w.Header().Get("Idempotent-Replayed"), c.status, c.wantBody, c.location, c.replayed)
		}
	}
}
