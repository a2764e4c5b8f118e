// Package money shows the ledger's amounts as people read them. The ledger
// counts integer minor units (1250 EUR is 12.50 euros); how many minor
// units make a major one is the currency's exponent: ISO 4217's for the
// codes it lists, the operator's for any other code (a ledger may count
// loyalty points or a token). The console and the CLI tables print
// "12.50 EUR (1250)": the amount people read, and beside it the integer
// the API and the database hold.
package money

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MaxExponent bounds an exponent: an int64 has 19 digits, so a larger
// exponent would put every amount after the decimal point.
const MaxExponent = 18

// iso4217Codes are the ISO 4217 codes whose minor unit is 2: the active
// list, with the codes replaced in the last few years that ledgers may
// still hold (ANG, CUC, HRK, SLL, ZWL). Codes with exponent ≠ 2 are in
// iso4217Exponents. The funds and metals without a minor unit (XAU, XDR,
// XXX …) are in neither: an amount of them is shown as it is stored.
var iso4217Codes = strings.Fields(`
	AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BOV
	BRL BSD BTN BWP BYN BZD CAD CDF CHE CHF CHW CNY COP COU CRC CUC CUP CVE
	CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GTQ GYD HKD
	HNL HRK HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK LBP LKR
	LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD
	NGN NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR
	SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY
	TTD TWD TZS UAH USD USN UYU UZS VED VES WST XCD XCG YER ZAR ZMW ZWG ZWL`)

// iso4217Exponents are the ISO 4217 codes whose minor unit is not 2.
var iso4217Exponents = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0,
	"KRW": 0, "PYG": 0, "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0,
	"XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	"CLF": 4, "UYW": 4,
}

var iso4217 = func() map[string]int {
	m := maps.Clone(iso4217Exponents)
	for _, c := range iso4217Codes {
		m[c] = 2
	}
	return m
}()

// Currencies knows the exponent of every ISO 4217 code and of the codes
// the operator configured. A nil *Currencies knows ISO 4217's only. It is
// read-only once made, so safe for concurrent use.
type Currencies struct {
	configured map[string]int
}

// New returns the ISO 4217 table with exponents for further codes. A
// configured code wins over ISO 4217's exponent, for a ledger that counts
// a currency in units other than its official minor one.
func New(exponents map[string]int) (*Currencies, error) {
	for code, e := range exponents {
		if err := checkCode(code); err != nil {
			return nil, err
		}
		if e < 0 || e > MaxExponent {
			return nil, fmt.Errorf("currency %s: exponent %d is outside 0..%d", code, e, MaxExponent)
		}
	}
	return &Currencies{configured: maps.Clone(exponents)}, nil
}

// checkCode accepts what the ledger accepts as a currency: 3 to 12
// upper-case letters or digits, starting with a letter.
func checkCode(code string) error {
	ok := len(code) >= 3 && len(code) <= 12 && code[0] >= 'A' && code[0] <= 'Z'
	for i := 0; ok && i < len(code); i++ {
		ok = code[i] >= 'A' && code[i] <= 'Z' || code[i] >= '0' && code[i] <= '9'
	}
	if !ok {
		return fmt.Errorf("currency %q is not 3..12 upper-case letters or digits starting with a letter", code)
	}
	return nil
}

// ParseExponents reads "CODE=N,…" (the form of --currency-exponents),
// spaces allowed around items. An empty string is no exponents.
func ParseExponents(s string) (map[string]int, error) {
	out := map[string]int{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		code, n, ok := strings.Cut(item, "=")
		code, n = strings.TrimSpace(code), strings.TrimSpace(n)
		if !ok {
			return nil, fmt.Errorf("currency exponent %q: want CODE=N such as GOLD=3", item)
		}
		if err := checkCode(code); err != nil {
			return nil, err
		}
		e, err := strconv.Atoi(n)
		if err != nil || e < 0 || e > MaxExponent {
			return nil, fmt.Errorf("currency %s: exponent %q is not an integer in 0..%d", code, n, MaxExponent)
		}
		if _, dup := out[code]; dup {
			return nil, fmt.Errorf("currency %s is given an exponent twice", code)
		}
		out[code] = e
	}
	return out, nil
}

// Exponent is code's exponent, and whether it is known.
func (c *Currencies) Exponent(code string) (int, bool) {
	if c != nil {
		if e, ok := c.configured[code]; ok {
			return e, true
		}
	}
	e, ok := iso4217[code]
	return e, ok
}

// Configured lists the configured codes, sorted.
func (c *Currencies) Configured() []string {
	if c == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.configured))
}

// Major writes amount minor units with exponent decimals: Major(1250, 2)
// is "12.50", Major(-5, 3) "-0.005". Every int64 is exact, math.MinInt64
// included.
func Major(amount int64, exponent int) (string, error) {
	if exponent < 0 || exponent > MaxExponent {
		return "", errors.New("money: exponent outside 0..18")
	}
	// The magnitude as uint64: -math.MinInt64 does not fit an int64, but
	// its two's complement read unsigned is exactly 2^63.
	mag := uint64(amount)
	if amount < 0 {
		mag = -mag
	}
	digits := strconv.FormatUint(mag, 10)
	if exponent > 0 {
		if len(digits) <= exponent {
			digits = strings.Repeat("0", exponent-len(digits)+1) + digits
		}
		cut := len(digits) - exponent
		digits = digits[:cut] + "." + digits[cut:]
	}
	if amount < 0 {
		return "-" + digits, nil
	}
	return digits, nil
}

// Format is amount of code as people read it, with the stored integer
// beside it: "12.50 EUR (1250)", "-0.005 BHD (-5)". An exponent of 0 has
// nothing to add ("1250 JPY"); a code of unknown exponent is shown as
// stored and says so ("1250 GOLD (minor units)").
func (c *Currencies) Format(amount int64, code string) string {
	raw := strconv.FormatInt(amount, 10)
	e, ok := c.Exponent(code)
	switch {
	case code == "":
		return raw
	case !ok:
		return raw + " " + code + " (minor units)"
	case e == 0:
		return raw + " " + code
	}
	major, _ := Major(amount, e) // e is within bounds: New checked it
	return major + " " + code + " (" + raw + ")"
}
