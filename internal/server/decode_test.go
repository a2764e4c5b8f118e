package server

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// FuzzDecodeTransfer: the transfer body decoder never panics, and an amount
// it accepts is a JSON number (the handler then requires an integer).
func FuzzDecodeTransfer(f *testing.F) {
	for _, s := range []string{
		`{"debit_account_id":"a","credit_account_id":"b","amount":1,"currency":"EUR"}`,
		`{"amount":1.5}`, `{"amount":"1"}`, `{"colour":1}`, `{}`, `[]`, `{"a":1}{"b":2}`, `{"amount":99999999999999999999}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var in transferRequest
		r := httptest.NewRequest("POST", "/v1/transfers", strings.NewReader(body))
		if err := decode(r, &in); err != nil {
			return
		}
		if in.Amount != "" {
			if _, err := strconv.ParseFloat(string(in.Amount), 64); err != nil && !strings.Contains(err.Error(), "range") {
				t.Fatalf("decoded amount %q is not a JSON number", in.Amount)
			}
		}
	})
}

func TestDecodeRefusesUnknownFieldsAndTrailingData(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"colour":"red"}`, `{"amount":1} {"amount":2}`, `{"amount":`, `[1]`} {
		var in transferRequest
		if err := decode(httptest.NewRequest("POST", "/", strings.NewReader(body)), &in); err == nil {
			t.Errorf("decode(%q) accepted", body)
		}
	}
	var in transferRequest
	if err := decode(httptest.NewRequest("POST", "/", strings.NewReader(`{"amount":12,"currency":"EUR"}`)), &in); err != nil || in.Amount != "12" {
		t.Fatalf("valid body: %v %+v", err, in)
	}
}
