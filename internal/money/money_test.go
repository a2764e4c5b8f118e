package money

import (
	"math"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	c, err := New(map[string]int{"GOLD": 3, "POINTS": 0, "ISK": 2})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		amount int64
		code   string
		want   string
	}{
		{1250, "EUR", "12.50 EUR (1250)"},
		{1002, "EUR", "10.02 EUR (1002)"},
		{0, "EUR", "0.00 EUR (0)"},
		{5, "EUR", "0.05 EUR (5)"},
		{-5, "EUR", "-0.05 EUR (-5)"},
		{-1250, "USD", "-12.50 USD (-1250)"},
		{100, "EUR", "1.00 EUR (100)"},
		{1250, "JPY", "1250 JPY"},
		{-1250, "KRW", "-1250 KRW"},
		{1250, "BHD", "1.250 BHD (1250)"},
		{-5, "KWD", "-0.005 KWD (-5)"},
		{12345, "CLF", "1.2345 CLF (12345)"},
		{7, "UYW", "0.0007 UYW (7)"},
		{math.MaxInt64, "EUR", "92233720368547758.07 EUR (9223372036854775807)"},
		{math.MinInt64, "EUR", "-92233720368547758.08 EUR (-9223372036854775808)"},
		{math.MinInt64, "JPY", "-9223372036854775808 JPY"},
		{math.MinInt64, "BHD", "-9223372036854775.808 BHD (-9223372036854775808)"},
		// Configured codes, and a configured exponent over ISO 4217's.
		{1250, "GOLD", "1.250 GOLD (1250)"},
		{1250, "POINTS", "1250 POINTS"},
		{1250, "ISK", "12.50 ISK (1250)"},
		// Unknown codes, and the codes ISO 4217 gives no minor unit.
		{1250, "TOKEN", "1250 TOKEN (minor units)"},
		{1250, "XAU", "1250 XAU (minor units)"},
		{math.MinInt64, "TOKEN", "-9223372036854775808 TOKEN (minor units)"},
		{1250, "", "1250"},
	}
	for _, tt := range tests {
		if got := c.Format(tt.amount, tt.code); got != tt.want {
			t.Errorf("Format(%d, %q) = %q, want %q", tt.amount, tt.code, got, tt.want)
		}
	}
	// Without configuration: ISO 4217 only.
	var iso *Currencies
	for _, tt := range []struct {
		amount int64
		code   string
		want   string
	}{{1250, "EUR", "12.50 EUR (1250)"}, {1250, "ISK", "1250 ISK"}, {1250, "GOLD", "1250 GOLD (minor units)"}} {
		if got := iso.Format(tt.amount, tt.code); got != tt.want {
			t.Errorf("nil: Format(%d, %q) = %q, want %q", tt.amount, tt.code, got, tt.want)
		}
	}
}

func TestMajor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		amount   int64
		exponent int
		want     string
	}{
		{0, 0, "0"}, {0, 2, "0.00"}, {1, 18, "0.000000000000000001"}, {-1, 18, "-0.000000000000000001"},
		{math.MaxInt64, 18, "9.223372036854775807"}, {math.MinInt64, 18, "-9.223372036854775808"},
		{math.MinInt64, 0, "-9223372036854775808"}, {math.MinInt64 + 1, 2, "-92233720368547758.07"},
		{10, 1, "1.0"}, {-10, 1, "-1.0"}, {99, 2, "0.99"}, {-100, 2, "-1.00"},
	}
	for _, tt := range tests {
		got, err := Major(tt.amount, tt.exponent)
		if err != nil || got != tt.want {
			t.Errorf("Major(%d, %d) = %q, %v; want %q", tt.amount, tt.exponent, got, err, tt.want)
		}
	}
	for _, e := range []int{-1, 19} {
		if _, err := Major(1, e); err == nil {
			t.Errorf("Major(1, %d): no error", e)
		}
	}
}

func TestISO4217Table(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range iso4217Codes {
		if len(c) != 3 || checkCode(c) != nil {
			t.Errorf("%q is not a 3-letter code", c)
		}
		if seen[c] {
			t.Errorf("%s listed twice", c)
		}
		seen[c] = true
		if _, ok := iso4217Exponents[c]; ok {
			t.Errorf("%s is both exponent 2 and %d", c, iso4217Exponents[c])
		}
	}
	for _, c := range []string{"EUR", "USD", "GBP", "CHF", "CNY", "INR"} {
		if e, ok := (*Currencies)(nil).Exponent(c); !ok || e != 2 {
			t.Errorf("%s: exponent %d, %v; want 2", c, e, ok)
		}
	}
}

func TestParseExponents(t *testing.T) {
	t.Parallel()
	got, err := ParseExponents(" GOLD=3, POINTS = 0 ,,")
	if err != nil || len(got) != 2 || got["GOLD"] != 3 || got["POINTS"] != 0 {
		t.Fatalf("ParseExponents = %v, %v", got, err)
	}
	if got, err := ParseExponents(""); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	for _, bad := range []struct{ in, want string }{
		{"GOLD", "want CODE=N"},
		{"gold=2", "upper-case"},
		{"GO=2", "upper-case"},
		{"1GOLD=2", "upper-case"},
		{"GOLD=19", "0..18"},
		{"GOLD=-1", "0..18"},
		{"GOLD=two", "0..18"},
		{"GOLD=2,GOLD=3", "twice"},
	} {
		if _, err := ParseExponents(bad.in); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseExponents(%q) = %v, want an error with %q", bad.in, err, bad.want)
		}
	}
	if _, err := New(map[string]int{"GOLD": 19}); err == nil {
		t.Error("New accepted exponent 19")
	}
	if _, err := New(map[string]int{"eur": 2}); err == nil {
		t.Error("New accepted a lower-case code")
	}
}
