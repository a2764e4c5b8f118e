package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
)

// POST /v1/transfers/batch posts each transfer on its own: a refusal does
// not stop the others, the answer is stored under the key, each transfer
// is idempotent by its id (a derived one without id), and only created
// transfers emit events.
func TestTransferBatch(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ts := inputServer(t, d)
		body := `{"transfers":[` +
			`{"id":"b1","debit_account_id":"a","credit_account_id":"b","amount":3,"currency":"EUR"},` +
			`{"id":"b2","debit_account_id":"w","credit_account_id":"b","amount":1,"currency":"EUR"},` +
			`{"debit_account_id":"b","credit_account_id":"a","amount":2,"currency":"EUR"}]}`
		first := sendJSON(t, ts, "/v1/transfers/batch", "batch-1", body)
		if first.Status != http.StatusOK {
			t.Fatalf("first: %d %s", first.Status, first.Body)
		}
		var res struct {
			Data []struct {
				Status   string `json:"status"`
				Transfer *struct {
					ID string `json:"id"`
				} `json:"transfer"`
				Error *struct {
					Code string `json:"code"`
				} `json:"error"`
			} `json:"data"`
		}
		if err := json.Unmarshal(first.Body, &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Data) != 3 || res.Data[0].Status != "created" || res.Data[0].Transfer.ID != "b1" ||
			res.Data[1].Status != "refused" || res.Data[1].Error.Code != "insufficient_funds" || res.Data[1].Transfer != nil ||
			res.Data[2].Status != "created" || res.Data[2].Transfer.ID == "" {
			t.Fatalf("results: %s", first.Body)
		}
		derived := res.Data[2].Transfer.ID
		wantRows := func(transfers, entries, events int) {
			t.Helper()
			var n [3]int
			for i, q := range []string{`SELECT count(*) FROM ledger_transfers`, `SELECT count(*) FROM ledger_entries`,
				`SELECT count(*) FROM idem_outbox WHERE type = 'transfer.created'`} {
				if err := d.Reader().QueryRow(context.Background(), q).Scan(&n[i]); err != nil {
					t.Fatal(err)
				}
			}
			if n != [3]int{transfers, entries, events} {
				t.Fatalf("transfers, entries, events = %v, want %v", n, [3]int{transfers, entries, events})
			}
		}
		wantRows(2, 4, 2)
		var b2 int
		if err := d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM ledger_transfers WHERE id = 'b2'`).Scan(&b2); err != nil || b2 != 0 {
			t.Fatalf("the refused transfer: %d rows, %v", b2, err)
		}

		// The same request: the stored answer, nothing new.
		again := sendJSON(t, ts, "/v1/transfers/batch", "batch-1", body)
		if again.Status != http.StatusOK || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
			t.Fatalf("replay: %d %v %s", again.Status, again.Header, again.Body)
		}
		// Under another key: b1 exists, the transfer without id gets
		// another derived id (the key names it), b2 is refused again.
		other := sendJSON(t, ts, "/v1/transfers/batch", "batch-2", body)
		if other.Status != http.StatusOK || !strings.Contains(string(other.Body), `"status":"existing"`) {
			t.Fatalf("another key: %d %s", other.Status, other.Body)
		}
		if strings.Contains(string(other.Body), derived) {
			t.Fatalf("another key reused the derived id %s: %s", derived, other.Body)
		}
		wantRows(3, 6, 3)

		// Refused as a whole, nothing stored: the key stays free.
		var many strings.Builder
		many.WriteString(`{"transfers":[`)
		for i := range 1001 {
			if i > 0 {
				many.WriteString(",")
			}
			fmt.Fprintf(&many, `{"debit_account_id":"a","credit_account_id":"b","amount":1,"currency":"EUR"}`)
		}
		many.WriteString("]}")
		for _, bad := range []string{many.String(), `{"transfers":[]}`, `{"transfers":[{"amount":1}, 3]}`, `{"transfers":{}}`} {
			r := sendJSON(t, ts, "/v1/transfers/batch", "batch-bad", bad)
			wantRefusal(t, r, http.StatusBadRequest, "invalid_request", "transfers", false)
		}
		wantRows(3, 6, 3)
		if r := sendJSON(t, ts, "/v1/transfers/batch", "batch-bad", body); r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("the key after refusals: %d %v", r.Status, r.Header)
		}
	})
}
