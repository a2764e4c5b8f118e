package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(m)) }

// idemSchema is a schema of tb's own with idem's tables, and idem's driver
// on it: the least programs read and write them as idem does.
func idemSchema(tb testing.TB) (d *postgres.Driver, url, schema string) {
	tb.Helper()
	url, schema = testpg.URL(tb), testpg.Schema(tb)
	d, err := postgres.Open(tb.Context(), postgres.Config{URL: url, SearchPath: schema})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	if err := d.Migrate(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	return d, url, schema
}

// The cold replay's least program answers what idem stored under the
// key: its status, headers and body, marked a replay; a key with nothing
// stored is 404, a request without a key 400.
func TestStored(t *testing.T) {
	ctx := t.Context()
	d, url, schema := idemSchema(t)
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

// BenchmarkLeastFirstArrival is the least program doing idem's work for a
// first arrival (bound -idem-work: the key required, strict JSON, the
// keys' claims, the transfers and the stored answers in three round
// trips) called in process as the service's BenchmarkHandlerFirstArrival
// calls idem's handler, so that -benchmem counts its allocations per
// first arrival beside idem's.
func BenchmarkLeastFirstArrival(b *testing.B) {
	ctx := b.Context()
	d, url, schema := idemSchema(b)
	setup, err := os.ReadFile("../pgbench/setup.sql")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, string(setup)); err != nil {
		b.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	body := bytes.Repeat([]byte("x"), 300)
	commit, err := boundCommit(ctx, conn, "../pgbench/transfer_one_statement.sql", body, 3, true)
	if err != nil {
		b.Fatal(err)
	}
	h := batchHandler(128, body, true, commit)
	transfer := string(transferBody(1, 501))
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/transfers", strings.NewReader(transfer))
			r.Header.Set("Idempotency-Key", fmt.Sprint("first-", seq.Add(1)))
			w := httptest.NewRecorder()
			h(w, r)
			if w.Code != http.StatusCreated {
				b.Fatalf("POST /v1/transfers: %d %s", w.Code, w.Body)
			}
		}
	})
}
