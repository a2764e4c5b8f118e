package server

import (
	"bytes"
	"encoding/json"
	"math/big"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDecodeTransfer: the transfer body decoder never panics, and an
// amount it then reads is a JSON number whose value is that integer.
func FuzzDecodeTransfer(f *testing.F) {
	for _, s := range []string{
		`{"debit_account_id":"a","credit_account_id":"b","amount":1,"currency":"EUR"}`,
		`{"amount":1.5}`, `{"amount":"1"}`, `{"colour":1}`, `{}`, `[]`, `{"a":1}{"b":2}`, `{"amount":99999999999999999999}`,
		`{"amount":1e3}`, `{"amount":1000.0}`, `{"amount":-0}`, `{"amount":1,"amount":2}`, `{"amount":12e-1}`,
		`{"amount":-9223372036854775808}`, `{"amount":9223372036854775807e0}`, `{"amount":0.00001e5}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var in transferRequest
		r := httptest.NewRequest("POST", "/v1/transfers", strings.NewReader(body))
		if err := decode(r, &in); err != nil {
			return
		}
		n, err := integer("amount", in.Amount)
		if err != nil {
			return
		}
		var v any
		if json.Unmarshal(in.Amount, &v) != nil {
			t.Fatalf("amount %s read as %d is not JSON", in.Amount, n)
		}
		if _, ok := v.(float64); !ok {
			t.Fatalf("amount %s read as %d is not a JSON number", in.Amount, n)
		}
		// Exact arithmetic, for amounts short enough not to cost much.
		if len(in.Amount) <= 64 {
			want, ok := new(big.Rat).SetString(string(in.Amount))
			if !ok || !want.IsInt() || want.Num().Cmp(big.NewInt(n)) != 0 {
				t.Fatalf("amount %s read as %d", in.Amount, n)
			}
		}
	})
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ body, want string }{
		{`{"colour":"red"}`, `unknown field "colour": the body has a member this route does not take`},
		{`{"amount":1} {"amount":2}`, "trailing data"},
		{`{"amount":`, "amount: the JSON text ends early"},
		{`[1]`, "want a JSON object"},
		{`null`, "want a JSON object"},
		{``, "no JSON value"},
		{`{"amount":1,"amount":2}`, `member "amount" is sent more than once`},
		{`{"metadata":{"a":{"b":1,"b":1}}}`, `metadata.a: member "b" is sent more than once`},
		{"{\"currency\":\"EU\xff\"}", "currency: string is not valid UTF-8"},
		{`{"currency":"\ud800"}`, `currency: string has \ud800, half of a surrogate pair`},
		{`{"metadata":{"k":"\udc00"}}`, `metadata.k: string has \udc00`},
		{`{"metadata":` + strings.Repeat(`{"a":`, 32) + `1` + strings.Repeat(`}`, 32) + `}`, "nest more than 32 deep"},
		{`{"currency":5}`, "currency: want a string, not a number"},
		{`{"debit_account_id":["a"]}`, "debit_account_id: want a string, not an array"},
	} {
		var in transferRequest
		err := decode(httptest.NewRequest("POST", "/", strings.NewReader(tt.body)), &in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("decode(%.60q) = %v, want an error with %q", tt.body, err, tt.want)
		}
	}
	var in transferRequest
	body := `{"amount":12,"currency":"EUR","metadata":` + strings.Repeat(`{"a":`, 31) + `"\ud83d\ude00"` + strings.Repeat(`}`, 31) + `}`
	if err := decode(httptest.NewRequest("POST", "/", strings.NewReader(body)), &in); err != nil || string(in.Amount) != "12" {
		t.Fatalf("valid body: %v %+v", err, in)
	}
}

func TestInteger(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		raw  string
		want int64
	}{
		{"1", 1}, {"0", 0}, {"-0", 0}, {"0.0e-7", 0}, {"-5", -5}, {"1000.0", 1000}, {"1e3", 1000}, {"1E+3", 1000},
		{"10000e-1", 1000}, {"0.5e1", 5}, {"12.50e1", 125}, {"9223372036854775807", 9223372036854775807},
		{"-9223372036854775808", -9223372036854775808}, {"922337203685477580.7e1", 9223372036854775807},
		{"1e0000000000000000001", 10}, {"0e99999999999", 0},
	} {
		if got, err := integer("amount", json.RawMessage(tt.raw)); err != nil || got != tt.want {
			t.Errorf("integer(%s) = %d, %v; want %d", tt.raw, got, err, tt.want)
		}
	}
	for _, tt := range []struct{ raw, want string }{
		{`"1"`, "amount: want a JSON number, not a string"},
		{`true`, "amount: want a JSON number"},
		{`{}`, "amount: want a JSON number"},
		{``, "amount: missing"},
		{`null`, "amount: missing"},
		{`1.5`, "amount: 1.5 is not an integer"},
		{`1e-3`, "amount: 1e-3 is not an integer"},
		{`1e-99999999999`, "is not an integer"},
		{`9223372036854775808`, "amount: 9223372036854775808 is outside -9223372036854775808..9223372036854775807"},
		{`-9223372036854775809`, "is outside"},
		{`99999999999999999999`, "is outside"},
		{`1e19`, "is outside"},
		{`1e999999999999`, "is outside"},
	} {
		if got, err := integer("amount", json.RawMessage(tt.raw)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("integer(%s) = %d, %v; want an error with %q", tt.raw, got, err, tt.want)
		}
	}
}

// BenchmarkDecodeTransfer is the strict decoder on a transfer body with a
// little metadata: the check before encoding/json reads it is its cost.
func BenchmarkDecodeTransfer(b *testing.B) {
	body := []byte(`{"id":"t-0001","debit_account_id":"bank","credit_account_id":"alice","amount":5000,"currency":"EUR","metadata":{"order":42,"note":"café ☕","tags":["a","b"]}}`)
	b.ReportAllocs()
	for b.Loop() {
		var in transferRequest
		if err := decode(httptest.NewRequest("POST", "/v1/transfers", bytes.NewReader(body)), &in); err != nil {
			b.Fatal(err)
		}
		if _, err := integer("amount", in.Amount); err != nil {
			b.Fatal(err)
		}
	}
}
