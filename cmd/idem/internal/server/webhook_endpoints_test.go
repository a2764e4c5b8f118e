package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/webhook"
)

// A tenant registers an endpoint through the API and receives its own
// events there, signed, with webhook-id the event's id; another tenant
// neither sees nor changes the endpoint, and its events do not go there.
func TestWebhookEndpointsDeliverPerTenant(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var mu sync.Mutex
		var got []*http.Request
		var bodies [][]byte
		rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got, bodies = append(got, r), append(bodies, b)
			mu.Unlock()
		}))
		t.Cleanup(rc.Close)
		loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		var cfg config.Config
		s, ts := twoTenants(t, d, nil, func(c *config.Config) {
			c.WebhookAllowNetworks = loopback
			c.Publish = "stdout"
			cfg = *c
		})
		// The relay, with the deliverer beside it, as serve runs them.
		r, closePub, err := NewRelay(context.Background(), cfg, d, slog.New(slog.DiscardHandler), nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		s.relay = r
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; closePub() })

		st, b := tenantCall(t, ts, tokenA, "POST", "/v1/webhook-endpoints", "ep-1",
			`{"url":"`+rc.URL+`/hook","event_types":["transfer.*"]}`)
		if st != 201 {
			t.Fatalf("create: %d %s", st, b)
		}
		var ep struct{ ID, Secret string }
		_ = json.Unmarshal(b, &ep)
		for _, c := range []struct{ method, path, key, body string }{
			{"GET", "/v1/webhook-endpoints/" + ep.ID, "", ""},
			{"PATCH", "/v1/webhook-endpoints/" + ep.ID, "b-patch", `{"url":"https://example.com/"}`},
			{"DELETE", "/v1/webhook-endpoints/" + ep.ID, "b-del", ""},
			{"POST", "/v1/webhook-endpoints/" + ep.ID + "/replay", "b-replay", `{"since":"2020-01-01T00:00:00Z"}`},
			{"POST", "/v1/webhook-endpoints/" + ep.ID + "/rotate-secret", "b-rot", `{}`},
			{"GET", "/v1/webhook-endpoints/" + ep.ID + "/attempts", "", ""},
		} {
			if st, b := tenantCall(t, ts, tokenB, c.method, c.path, c.key, c.body); st != 404 {
				t.Errorf("tenant b: %s %s: %d %s", c.method, c.path, st, b)
			}
		}
		if st, b := tenantCall(t, ts, tokenB, "GET", "/v1/webhook-endpoints", "", ""); st != 200 || strings.Contains(string(b), ep.ID) {
			t.Errorf("tenant b's list: %d %s", st, b)
		}

		for _, token := range []string{tokenB, tokenA} {
			if st, b := tenantCall(t, ts, token, "POST", "/v1/transfers", "t-hook", `{"debit_account_id":"x","credit_account_id":"y","amount":7,"currency":"EUR"}`); st != 201 {
				t.Fatalf("transfer: %d %s", st, b)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			arrived := slices.ContainsFunc(bodies, func(b []byte) bool { return strings.Contains(string(b), `"amount":7`) })
			mu.Unlock()
			if arrived {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no delivery of tenant a's transfer in 30s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // a delivery of b's event would have come by now
		mu.Lock()
		defer mu.Unlock()
		// Tenant a's transfers' events, read from the table (GET /v1/events
		// lists them only once every older transaction of the cluster
		// ended): the one above, and the one twoTenants made, which the
		// relay may publish only once the endpoint exists.
		q := `SELECT id::text, convert_from(payload, 'UTF8') LIKE $3 FROM idem_outbox WHERE tenant = $1 AND type = $2`
		if d.Dialect() == "sqlite" {
			q = `SELECT id, CAST(payload AS TEXT) LIKE ?3 FROM idem_outbox WHERE tenant = ?1 AND type = ?2`
		}
		rows, err := d.Reader().Query(context.Background(), q, "a", "transfer.created", `%"amount":7%`)
		if err != nil {
			t.Fatal(err)
		}
		tenantA, want := map[string]bool{}, ""
		for rows.Next() {
			var id string
			var this bool
			if err := rows.Scan(&id, &this); err != nil {
				t.Fatal(err)
			}
			tenantA[id] = true
			if this {
				want = id
			}
		}
		rows.Close()
		// At least once: a delivery may come again (its lease ran out on a
		// loaded machine), always one of tenant a's events, never b's, and
		// the one above among them.
		first := -1
		for i, r := range got {
			id := r.Header.Get("webhook-id")
			if !tenantA[id] {
				t.Fatalf("delivery %d of %d: webhook-id %q, not one of tenant a's events %v", i+1, len(got), id, tenantA)
			}
			if id == want && first < 0 {
				first = i
			}
		}
		if want == "" || first < 0 {
			t.Fatalf("tenant a's event %q was not delivered (%d deliveries)", want, len(got))
		}
		v, err := webhook.NewVerifier(webhook.Endpoint{Name: "a", Provider: webhook.ProviderStandard, Secrets: []string{ep.Secret}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(got[first].Header, bodies[first], time.Now()); err != nil {
			t.Errorf("signature: %v", err)
		}
		if !strings.Contains(string(bodies[first]), `"type":"transfer.created"`) || !strings.Contains(string(bodies[first]), `"amount":7`) {
			t.Errorf("body %s", bodies[first])
		}
		// The attempt is logged, for tenant a.
		deadline = time.Now().Add(10 * time.Second)
		for {
			_, ab := tenantCall(t, ts, tokenA, "GET", "/v1/webhook-endpoints/"+ep.ID+"/attempts", "", "")
			if strings.Contains(string(ab), `"status":200`) && strings.Contains(string(ab), want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("attempts: %s", ab)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
