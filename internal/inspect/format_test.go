package inspect_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/internal/money"
	"github.com/idemhq/idem/ledger"
)

// TestWriteBalanceAmounts: the table shows amounts in major units by the
// currency's exponent, with the stored integer beside them, never minor
// units as if they were major.
func TestWriteBalanceAmounts(t *testing.T) {
	t.Parallel()
	gold, err := money.New(map[string]int{"GOLD": 3})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		currency                string
		debits, credits, amount int64
		cur                     *money.Currencies
		want                    []string
	}{
		{"EUR", 248, 1250, 1002, nil, []string{
			"debits posted   2.48 EUR (248)", "credits posted  12.50 EUR (1250)", "balance         10.02 EUR (1002)"}},
		{"JPY", 0, 1250, 1250, nil, []string{"balance         1250 JPY\n"}},
		{"BHD", 1250, 0, -1250, nil, []string{"balance         -1.250 BHD (-1250)"}},
		{"EUR", 0, 0, math.MinInt64, nil, []string{"balance         -92233720368547758.08 EUR (-9223372036854775808)"}},
		{"GOLD", 0, 1250, 1250, gold, []string{"balance         1.250 GOLD (1250)"}},
		{"GOLD", 0, 1250, 1250, nil, []string{"balance         1250 GOLD (minor units)"}},
	}
	for _, tt := range tests {
		b := inspect.Balance{Tenant: "acme", Account: ledger.Account{ID: "a", Currency: tt.currency},
			Believed: ledger.Balance{AccountID: "a", DebitsPosted: tt.debits, CreditsPosted: tt.credits, Balance: tt.amount}}
		var out bytes.Buffer
		if err := inspect.WriteBalance(&out, b, tt.cur); err != nil {
			t.Fatal(err)
		}
		for _, want := range tt.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s %d: table lacks %q:\n%s", tt.currency, tt.amount, want, out.String())
			}
		}
	}
}
