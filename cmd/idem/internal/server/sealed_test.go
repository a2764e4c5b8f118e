package server

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/sealtest"
)

const serviceMarker = "MARKER-SERVICE-6011000990139424"

// The service given a Sealer (config.Config.Sealer, as cmd/idem's wiring
// sets it) stores its answers and events sealed, replays them, and
// answers a replay of a forgotten tenant 410 answer_forgotten without
// running it again; the other tenant replays as before.
func TestServiceSealed(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		s := sealtest.New()
		_, ts := twoTenants(t, d, nil, func(c *config.Config) { c.Sealer = s })
		body := `{"debit_account_id":"x","credit_account_id":"y","amount":7,"currency":"EUR","metadata":{"card":"` + serviceMarker + `"}}`
		st, first := tenantCall(t, ts, tokenA, "POST", "/v1/transfers", "t-marker", body)
		if st != 201 || !json.Valid(first) {
			t.Fatalf("transfer: %d %s", st, first)
		}
		st, again := tenantCall(t, ts, tokenA, "POST", "/v1/transfers", "t-marker", body)
		if st != 201 || string(again) != string(first) {
			t.Fatalf("sealed replay: %d %s; want %s", st, again, first)
		}

		count := func(q string, args ...any) int {
			t.Helper()
			var n int
			if err := d.Reader().QueryRow(ctx, q, args...).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return n
		}
		if n, plain := count(`SELECT count(*) FROM idem_keys`), count(`SELECT count(*) FROM idem_keys WHERE NOT sealed`); n != 7 || plain != 0 {
			t.Fatalf("idem_keys: %d rows, %d plaintext; want 7 sealed", n, plain)
		}
		if plain := count(`SELECT count(*) FROM idem_outbox WHERE NOT sealed`); plain != 0 {
			t.Fatalf("idem_outbox: %d plaintext rows", plain)
		}
		if d.Dialect() == "postgres" {
			sealtest.Absent(t, d, "", serviceMarker, "idem_keys", "idem_outbox")
		} else if n := count(`SELECT count(*) FROM idem_keys k, idem_outbox o
			WHERE instr(k.body, CAST($1 AS BLOB)) > 0 OR instr(o.payload, CAST($1 AS BLOB)) > 0`, serviceMarker); n != 0 {
			t.Fatalf("the plaintext is in %d stored rows", n)
		}
		transfers := count(`SELECT count(*) FROM ledger_transfers`)

		s.Forget("a")
		st, gone := tenantCall(t, ts, tokenA, "POST", "/v1/transfers", "t-marker", body)
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(gone, &p)
		if st != 410 || p.Code != idemhttp.CodeAnswerForgotten {
			t.Fatalf("replay of a forgotten tenant: %d %s; want 410 answer_forgotten", st, gone)
		}
		if st, b := tenantCall(t, ts, tokenA, "POST", "/v1/accounts", "acct-x", `{"id":"x","currency":"EUR"}`); st != 410 {
			t.Fatalf("account replay of a forgotten tenant: %d %s", st, b)
		}
		if st, b := tenantCall(t, ts, tokenB, "POST", "/v1/transfers", "t-0", `{"debit_account_id":"x","credit_account_id":"y","amount":5,"currency":"EUR"}`); st != 201 {
			t.Fatalf("the other tenant's replay: %d %s", st, b)
		}
		if n := count(`SELECT count(*) FROM ledger_transfers`); n != transfers {
			t.Fatalf("transfers %d after the replays, want %d: something ran again", n, transfers)
		}
	})
}
