package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/drivertest"
)

// inputServer is the service on d, without a relay, with accounts a and b
// (EUR) and an empty wallet w (EUR) that may not go below zero.
func inputServer(t *testing.T, d driver.Driver) *httptest.Server {
	t.Helper()
	return inputServerWith(t, d, true)
}

// inputServerWith is inputServer with group commit on or off.
func inputServerWith(t *testing.T, d driver.Driver, groupCommit bool) *httptest.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Relay = false
	cfg.GroupCommit = groupCommit
	s, err := New(context.Background(), cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for i, body := range []string{
		`{"id":"a","currency":"EUR"}`, `{"id":"b","currency":"EUR"}`,
		`{"id":"w","currency":"EUR","flags":{"debits_must_not_exceed_credits":true}}`,
	} {
		if r := sendJSON(t, ts, "/v1/accounts", "setup-"+string(rune('a'+i)), body); r.Status != http.StatusCreated {
			t.Fatalf("setup %s: %d %s", body, r.Status, r.Body)
		}
	}
	return ts
}

// sendJSON posts body to path with an Idempotency-Key.
func sendJSON(t *testing.T, ts *httptest.Server, path, key, body string) apiResponse {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return apiResponse{Status: res.StatusCode, Header: res.Header, Body: b}
}

// wantRefusal checks a problem answer: status, media type, code, a detail
// holding want, and no replay marker unless replayed.
func wantRefusal(t *testing.T, r apiResponse, status int, code, want string, replayed bool) {
	t.Helper()
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil || r.Status != status || p.Status != status || p.Code != code ||
		r.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(p.Detail, want) {
		t.Fatalf("answer %d %s %s, want %d %s with %q in the detail", r.Status, r.Header.Get("Content-Type"), r.Body, status, code, want)
	}
	if got := r.Header.Get("Idempotent-Replayed") == "true"; got != replayed {
		t.Fatalf("Idempotent-Replayed = %q, want replayed %v", r.Header.Get("Idempotent-Replayed"), replayed)
	}
}

// TestValidationRefusalNotStored: a request refused by validation (400)
// stores nothing, so the corrected request under the same Idempotency-Key
// is done, once, and replayed after. Each case's refused body holds the
// corrected one's transfer id, so the rows show which request did the work.
func TestValidationRefusalNotStored(t *testing.T) {
	t.Parallel()
	const ok = `{"id":"ID","debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR"}`
	cases := []struct {
		name, path, refused, want, corrected string
	}{
		{"unknown field", "/v1/transfers", `{"id":"ID","debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR","colour":"red"}`, `unknown field "colour": the body has a member this route does not take`, ok},
		{"zero amount", "/v1/transfers", `{"id":"ID","debit_account_id":"a","credit_account_id":"b","amount":0,"currency":"EUR"}`, "amount", ok},
		{"lowercase currency", "/v1/transfers", `{"id":"ID","debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"eur"}`, "currency", ok},
		{"amount as a string", "/v1/transfers", `{"id":"ID","debit_account_id":"a","credit_account_id":"b","amount":"5","currency":"EUR"}`, "amount: want a JSON number, not a string", ok},
		{"amount twice", "/v1/transfers", `{"id":"ID","debit_account_id":"a","credit_account_id":"b","amount":500,"amount":5,"currency":"EUR"}`, `member "amount" is sent more than once`, ok},
		{"half a surrogate pair", "/v1/transfers", `{"id":"ID","debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR","metadata":{"note":"\ud800"}}`, `metadata.note: string has \ud800`, ok},
		{"reversal amount as a string", "/v1/transfers/fund/reversals", `{"id":"ID","amount":"1"}`, "amount: want a JSON number, not a string", `{"id":"ID","amount":1}`},
		{"account currency lowercase", "/v1/accounts", `{"id":"ID","currency":"eur"}`, "currency", `{"id":"ID","currency":"EUR"}`},
	}
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ts := inputServer(t, d)
		if r := sendJSON(t, ts, "/v1/transfers", "fund", `{"id":"fund","debit_account_id":"a","credit_account_id":"b","amount":100,"currency":"EUR"}`); r.Status != http.StatusCreated {
			t.Fatalf("fund: %d %s", r.Status, r.Body)
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				id := "case-" + string(rune('a'+i))
				key := "k-" + id
				refused := strings.Replace(tc.refused, "ID", id, 1)
				corrected := strings.Replace(tc.corrected, "ID", id, 1)
				for range 2 { // refused again: still not stored
					wantRefusal(t, sendJSON(t, ts, tc.path, key, refused), http.StatusBadRequest, "invalid_request", tc.want, false)
					if n := countRows(t, d, `SELECT count(*) FROM idem_keys WHERE key = $1`, key); n != 0 {
						t.Fatalf("the refusal stored the key (%d rows)", n)
					}
				}
				first := sendJSON(t, ts, tc.path, key, corrected)
				if first.Status != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("corrected request under the same key: %d %s", first.Status, first.Body)
				}
				again := sendJSON(t, ts, tc.path, key, corrected)
				if again.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
					t.Fatalf("retry of the corrected request: %d %v %s", again.Status, again.Header, again.Body)
				}
				table := "ledger_transfers"
				if tc.path == "/v1/accounts" {
					table = "ledger_accounts"
				}
				if n := countRows(t, d, `SELECT count(*) FROM `+table+` WHERE id = $1`, id); n != 1 {
					t.Fatalf("%d rows with id %s, want 1", n, id)
				}
			})
		}
		// The six transfers of 5, the reversal of 1, the funding of 100.
		if n := countRows(t, d, `SELECT count(*) FROM ledger_transfers`); n != 8 {
			t.Fatalf("%d transfers, want 8", n)
		}
		if n := countRows(t, d, `SELECT coalesce(sum(amount), 0) FROM ledger_transfers WHERE id LIKE 'case-%'`); n != 6*5+1 {
			t.Fatalf("the cases' transfers sum to %d, want 31", n)
		}
	})
}

// TestBusinessRefusalStored: a 422 is the key's outcome: the same request
// gets it replayed — even once the wallet has the funds — and does nothing;
// another request under the key is a reuse.
func TestBusinessRefusalStored(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ts := inputServer(t, d)
		body := `{"id":"spend","debit_account_id":"w","credit_account_id":"b","amount":1,"currency":"EUR"}`
		first := sendJSON(t, ts, "/v1/transfers", "k-spend", body)
		wantRefusal(t, first, http.StatusUnprocessableEntity, "insufficient_funds", "", false)
		again := sendJSON(t, ts, "/v1/transfers", "k-spend", body)
		wantRefusal(t, again, http.StatusUnprocessableEntity, "insufficient_funds", "", true)
		if string(again.Body) != string(first.Body) {
			t.Fatalf("replayed %s, want %s", again.Body, first.Body)
		}
		if r := sendJSON(t, ts, "/v1/transfers", "k-topup", `{"debit_account_id":"a","credit_account_id":"w","amount":10,"currency":"EUR"}`); r.Status != http.StatusCreated {
			t.Fatalf("top-up: %d %s", r.Status, r.Body)
		}
		wantRefusal(t, sendJSON(t, ts, "/v1/transfers", "k-spend", body), http.StatusUnprocessableEntity, "insufficient_funds", "", true)
		wantRefusal(t, sendJSON(t, ts, "/v1/transfers", "k-spend", strings.Replace(body, `"amount":1`, `"amount":2`, 1)),
			http.StatusUnprocessableEntity, "idempotency_key_reused", "", false)
		if n := countRows(t, d, `SELECT count(*) FROM ledger_transfers WHERE id = 'spend'`); n != 0 {
			t.Fatalf("%d transfers 'spend', want 0", n)
		}
		if n := countRows(t, d, `SELECT count(*) FROM idem_keys WHERE key = 'k-spend' AND status = 422`); n != 1 {
			t.Fatalf("%d stored 422 outcomes of k-spend, want 1", n)
		}
	})
}

// TestInputRefused: each way a body could mean something other than it
// says is refused 400 invalid_request with a detail naming the field, and
// leaves no row and no stored key; integral spellings of an amount are
// that amount.
func TestInputRefused(t *testing.T) {
	t.Parallel()
	transfer := func(amount, extra string) string {
		return `{"debit_account_id":"a","credit_account_id":"b","amount":` + amount + `,"currency":"EUR"` + extra + `}`
	}
	cases := []struct {
		name, path, body, want string
	}{
		{"amount as a string", "/v1/transfers", transfer(`"1"`, ""), "amount: want a JSON number, not a string"},
		{"amount a fraction", "/v1/transfers", transfer(`1.5`, ""), "amount: 1.5 is not an integer"},
		{"amount a small exponent", "/v1/transfers", transfer(`1e-3`, ""), "amount: 1e-3 is not an integer"},
		{"amount beyond int64", "/v1/transfers", transfer(`9223372036854775808`, ""), "amount: 9223372036854775808 is outside"},
		{"amount a huge exponent", "/v1/transfers", transfer(`1e400`, ""), "amount: 1e400 is outside"},
		{"amount true", "/v1/transfers", transfer(`true`, ""), "amount: want a JSON number"},
		{"amount missing", "/v1/transfers", `{"debit_account_id":"a","credit_account_id":"b","currency":"EUR"}`, "amount: missing"},
		{"member twice", "/v1/transfers", transfer(`1`, `,"currency":"EUR"`), `member "currency" is sent more than once`},
		{"member twice, by escape", "/v1/transfers", transfer(`1`, `,"\u0063urrency":"EUR"`), `member "currency" is sent more than once`},
		{"metadata member twice", "/v1/transfers", transfer(`1`, `,"metadata":{"o":{"k":1,"k":2}}`), `metadata.o: member "k" is sent more than once`},
		{"currency not UTF-8", "/v1/transfers", "{\"debit_account_id\":\"a\",\"credit_account_id\":\"b\",\"amount\":1,\"currency\":\"E\xffR\"}", "currency: string is not valid UTF-8"},
		{"metadata not UTF-8", "/v1/transfers", transfer(`1`, ",\"metadata\":{\"note\":\"caf\xe9\"}"), "metadata.note: string is not valid UTF-8"},
		{"metadata name not UTF-8", "/v1/accounts", "{\"currency\":\"EUR\",\"metadata\":{\"\xc3\":1}}", "metadata: member name is not valid UTF-8"},
		{"lone low surrogate", "/v1/transfers", transfer(`1`, `,"metadata":{"note":"x\udc00"}`), `metadata.note: string has \udc00`},
		{"high surrogate unpaired", "/v1/transfers", transfer(`1`, `,"metadata":{"note":"\ud83d\u0041"}`), `metadata.note: string has \ud83d`},
		{"metadata too deep", "/v1/transfers", transfer(`1`, `,"metadata":`+strings.Repeat(`[`, 32)+strings.Repeat(`]`, 32)), "nest more than 32 deep"},
		{"reversal amount a string", "/v1/transfers/fund/reversals", `{"amount":"1"}`, "amount: want a JSON number, not a string"},
		{"reversal amount a fraction", "/v1/transfers/fund/reversals", `{"amount":0.5}`, "amount: 0.5 is not an integer"},
		{"reversal amount twice", "/v1/transfers/fund/reversals", `{"amount":1,"amount":2}`, `member "amount" is sent more than once`},
		{"reversal reason not UTF-8", "/v1/transfers/fund/reversals", "{\"reason\":\"\xfe\"}", "reason: string is not valid UTF-8"},
		{"reversal reason half a pair", "/v1/transfers/fund/reversals", `{"reason":"\udbff"}`, `reason: string has \udbff`},
		{"reversal reason with NUL", "/v1/transfers/fund/reversals", `{"reason":"a\u0000b"}`, "reason must be"},
		{"account id dot", "/v1/accounts", `{"id":".","currency":"EUR"}`, "dot segment"},
		{"account id dot-dot", "/v1/accounts", `{"id":"..","currency":"EUR"}`, "dot segment"},
		{"account flags a string", "/v1/accounts", `{"currency":"EUR","flags":{"debits_must_not_exceed_credits":"true"}}`, "flags.debits_must_not_exceed_credits: want true or false, not a string"},
		{"body an array", "/v1/accounts", `[{"currency":"EUR"}]`, "want a JSON object"},
	}
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ts := inputServer(t, d)
		if r := sendJSON(t, ts, "/v1/transfers", "fund", `{"id":"fund","debit_account_id":"a","credit_account_id":"b","amount":100,"currency":"EUR"}`); r.Status != http.StatusCreated {
			t.Fatalf("fund: %d %s", r.Status, r.Body)
		}
		before := [3]int{
			countRows(t, d, `SELECT count(*) FROM ledger_accounts`),
			countRows(t, d, `SELECT count(*) FROM ledger_transfers`),
			countRows(t, d, `SELECT count(*) FROM idem_keys`),
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				wantRefusal(t, sendJSON(t, ts, tc.path, "k-"+strings.ReplaceAll(tc.name, " ", "-"), tc.body), http.StatusBadRequest, "invalid_request", tc.want, false)
			})
		}
		after := [3]int{
			countRows(t, d, `SELECT count(*) FROM ledger_accounts`),
			countRows(t, d, `SELECT count(*) FROM ledger_transfers`),
			countRows(t, d, `SELECT count(*) FROM idem_keys`),
		}
		if after != before {
			t.Fatalf("accounts, transfers, keys = %v after the refusals, want %v", after, before)
		}

		// An amount spelled as an integral fraction or exponent is that
		// integer, as JSON Schema's "integer" has it.
		for i, amount := range []string{"1000.0", "1e3", "10000e-1"} {
			r := sendJSON(t, ts, "/v1/transfers", "k-spelled-"+amount, transfer(amount, `,"id":"spelled-`+string(rune('a'+i))+`"`))
			var got struct{ Amount int64 }
			if err := json.Unmarshal(r.Body, &got); r.Status != http.StatusCreated || err != nil || got.Amount != 1000 {
				t.Fatalf("amount %s: %d %s", amount, r.Status, r.Body)
			}
		}
		if n := countRows(t, d, `SELECT count(*) FROM ledger_transfers WHERE id LIKE 'spelled-%' AND amount = 1000`); n != 3 {
			t.Fatalf("%d transfers of 1000, want 3", n)
		}
	})
}

// TestAccountIDRoundTrip: an account created with an id that holds dots is
// read back at the URL its Location names; "." and ".." never get that far
// (TestInputRefused).
func TestAccountIDRoundTrip(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ts := inputServer(t, d)
		for _, id := range []string{"...", ".a", "a.", "a..b", "~", ":x", "-_.:~"} {
			r := sendJSON(t, ts, "/v1/accounts", "k-"+id, `{"id":"`+id+`","currency":"EUR"}`)
			if r.Status != http.StatusCreated {
				t.Fatalf("create %q: %d %s", id, r.Status, r.Body)
			}
			res, err := ts.Client().Get(ts.URL + r.Header.Get("Location"))
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ ID string }
			err = json.NewDecoder(res.Body).Decode(&got)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || err != nil || got.ID != id {
				t.Fatalf("GET %s: %d %q %v, want account %q", r.Header.Get("Location"), res.StatusCode, got.ID, err, id)
			}
		}
	})
}

// A problem's detail is a sentence for the client: no Go package prefix,
// no Go error text, and nothing the client did not send (a transfer id the
// server generated).
func TestDetailsAreForClients(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ts := inputServer(t, d)
		for _, id := range []string{"a", "b"} {
			if r := sendJSON(t, ts, "/v1/accounts", "acct-"+id, `{"id":"`+id+`","currency":"EUR"}`); r.Status != http.StatusCreated {
				t.Fatalf("account %s: %d %s", id, r.Status, r.Body)
			}
		}
		cases := []struct {
			name, key, body string
			status          int
			code, detail    string
		}{
			{"same account, no id sent", "same", `{"debit_account_id":"a","credit_account_id":"a","amount":5,"currency":"EUR"}`,
				http.StatusUnprocessableEntity, "same_account", `the transfer debits and credits the same account "a": it must move money between two accounts`},
			{"unknown field", "memo", `{"debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR","memo":"x"}`,
				http.StatusBadRequest, "invalid_request", `unknown field "memo": the body has a member this route does not take`},
			{"key too long", strings.Repeat("k", 256), `{"debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR"}`,
				http.StatusBadRequest, "idempotency_key_invalid", "the Idempotency-Key header is invalid: longer than 255 characters"},
		}
		for _, tc := range cases {
			r := sendJSON(t, ts, "/v1/transfers", tc.key, tc.body)
			var p struct{ Code, Detail string }
			if err := json.Unmarshal(r.Body, &p); err != nil || r.Status != tc.status || p.Code != tc.code || p.Detail != tc.detail {
				t.Errorf("%s: %d %s, want %d %s with the detail %q", tc.name, r.Status, r.Body, tc.status, tc.code, tc.detail)
			}
		}
		if n := countRows(t, d, `SELECT count(*) FROM ledger_transfers`); n != 0 {
			t.Fatalf("%d transfers written, want 0", n)
		}
	})
}
