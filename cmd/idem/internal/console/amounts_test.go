package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/cmd/idem/internal/server"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/ledger"
)

// TestAmountsInMajorUnits: the console shows amounts in major units by the
// currency's exponent, with the stored integer beside them — ISO 4217's
// for EUR (2), JPY (0) and BHD (3), the configured one for a code ISO 4217
// does not know — through the service as serve builds it.
func TestAmountsInMajorUnits(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Relay = false
	cfg.CurrencyExponents = map[string]int{"GOLD": 3}
	srv, err := server.New(context.Background(), cfg, drivertest.Open(t, "sqlite"),
		slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e := &env{URL: hs.URL}

	transfers := map[string]ledger.Transfer{}
	for _, c := range []struct {
		currency string
		amount   int64
	}{{"EUR", 1250}, {"JPY", 1250}, {"BHD", 1250}, {"GOLD", 1250}, {"TOKEN", 1250}} {
		from, to := "from-"+strings.ToLower(c.currency), "to-"+strings.ToLower(c.currency)
		e.post(t, "/v1/accounts", from, map[string]any{"id": from, "currency": c.currency}, nil)
		e.post(t, "/v1/accounts", to, map[string]any{"id": to, "currency": c.currency}, nil)
		var tr ledger.Transfer
		e.post(t, "/v1/transfers", "pay-"+c.currency, map[string]any{"debit_account_id": from, "credit_account_id": to,
			"amount": c.amount, "currency": c.currency}, &tr)
		transfers[c.currency] = tr
	}
	for currency, want := range map[string]string{
		"EUR":   "12.50 EUR (1250)",
		"JPY":   "1250 JPY",
		"BHD":   "1.250 BHD (1250)",
		"GOLD":  "1.250 GOLD (1250)",
		"TOKEN": "1250 TOKEN (minor units)",
	} {
		status, page := get(t, hs.URL+"/ui/transfers/"+transfers[currency].ID)
		if status != http.StatusOK || !strings.Contains(page, `id="amount">`+want+`<`) {
			t.Errorf("%s transfer page (%d) lacks %q", currency, status, want)
		}
	}
	// The debited account: balance, totals and the entry, negative.
	status, page := get(t, hs.URL+"/ui/accounts?tenant=default&id=from-eur")
	for _, want := range []string{
		`id="balance-now">-12.50 EUR (-1250)<`,
		`id="balance">-12.50 EUR (-1250)<`,
		`id="debits">12.50 EUR (1250)<`,
		`id="credits">0.00 EUR (0)<`,
		`<td class="amount">12.50 EUR (1250)</td>`,
		`<td class="amount">-12.50 EUR (-1250)</td>`,
	} {
		if status != http.StatusOK || !strings.Contains(page, want) {
			t.Errorf("account page (%d) lacks %q", status, want)
		}
	}
	if t.Failed() {
		t.Logf("account page:\n%s", page)
	}
}
