package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/storage"
)

// TestGroupCommitSIGKILL kills idem serve with group-commit batches in
// flight. Every acknowledged transfer must be in the database exactly once
// — its key's stored answer, the transfer, both entries, its event —
// nothing half-applied, and every unacknowledged one, sent again to a new
// process, must then happen once.
func TestGroupCommitSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: not in -short")
	}
	for _, dialect := range drivertest.Dialects {
		t.Run(dialect, func(t *testing.T) {
			p, db := serveDB(t, dialect, nil, "--relay=false")
			mustStatus(t, call(t, "POST", p.URL+"/v1/accounts", "acc-bank", map[string]any{"id": "bank", "currency": "EUR"}), 201)
			mustStatus(t, call(t, "POST", p.URL+"/v1/accounts", "acc-shop", map[string]any{"id": "shop", "currency": "EUR"}), 201)

			const clients = 32
			var (
				mu     sync.Mutex
				acked  = map[string]bool{}
				sent   []string
				next   atomic.Int64
				wg     sync.WaitGroup
				enough = make(chan struct{})
				once   sync.Once
			)
			for range clients {
				wg.Go(func() {
					for {
						key := fmt.Sprintf("gc-%d", next.Add(1))
						mu.Lock()
						sent = append(sent, key)
						mu.Unlock()
						status, err := postTransfer(p.URL, key)
						if err != nil {
							return // the process is gone
						}
						if status == http.StatusServiceUnavailable {
							// Busy (the batch queue's MaxWait on a loaded
							// machine): nothing stored, so it is one of the
							// unacknowledged ones sent again below.
							continue
						}
						if status != http.StatusCreated {
							t.Errorf("%s: status %d before the kill", key, status)
							return
						}
						mu.Lock()
						acked[key] = true
						if len(acked) >= 400 {
							once.Do(func() { close(enough) })
						}
						mu.Unlock()
					}
				})
			}
			select {
			case <-enough:
			case <-time.After(2 * time.Minute):
				t.Fatal("400 transfers were not acknowledged in 2 minutes")
			}
			p.signal(syscall.SIGKILL)
			_ = p.wait(30 * time.Second)
			wg.Wait()

			d, err := storage.Open(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			st := gcState(t, d)
			for key := range acked {
				if st.transfers[key] != 1 || st.entries[key] != 2 || st.answers[key] != 201 || st.events[key] != 1 {
					t.Errorf("acknowledged %s: %d transfers, %d entries, answer %d, %d events; want 1, 2, 201, 1",
						key, st.transfers[key], st.entries[key], st.answers[key], st.events[key])
				}
			}
			st.complete(t)
			t.Logf("%d sent, %d acknowledged, %d committed before the kill", len(sent), len(acked), len(st.transfers))

			// Everything sent, again, to a new process: each happens once.
			p2 := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--relay=false")
			for _, key := range sent {
				status, err := postTransfer(p2.URL, key)
				if err != nil || status != http.StatusCreated {
					t.Fatalf("%s again: %d %v", key, status, err)
				}
			}
			st = gcState(t, d)
			st.complete(t)
			if len(st.transfers) != len(sent) {
				t.Fatalf("%d transfers for %d keys sent", len(st.transfers), len(sent))
			}
			for _, key := range sent {
				if st.transfers[key] != 1 || st.events[key] != 1 {
					t.Fatalf("%s: %d transfers, %d events after the retries", key, st.transfers[key], st.events[key])
				}
			}
			if st.bankDebits != int64(len(sent)) {
				t.Fatalf("bank debited %d, want %d", st.bankDebits, len(sent))
			}
		})
	}
}

// postTransfer sends the transfer of key (its id is the key) and returns
// its status, or the error of a request the process never answered.
func postTransfer(base, key string) (int, error) {
	body := fmt.Sprintf(`{"id":%q,"debit_account_id":"bank","credit_account_id":"shop","amount":1,"currency":"EUR"}`, key)
	req, err := http.NewRequest(http.MethodPost, base+"/v1/transfers", bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// gcCounts is what the database holds for each transfer key.
type gcCounts struct {
	transfers, entries, events map[string]int
	answers                    map[string]int // the stored status
	claims                     int            // key rows without an answer
	bankDebits                 int64
}

func gcState(t *testing.T, d driver.Driver) gcCounts {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	st := gcCounts{transfers: map[string]int{}, entries: map[string]int{}, events: map[string]int{}, answers: map[string]int{}}
	count := func(q string, into map[string]int) {
		rows, err := tx.Query(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int
			if err := rows.Scan(&k, &n); err != nil {
				t.Fatal(err)
			}
			into[k] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	count(`SELECT id, count(*) FROM ledger_transfers WHERE id LIKE 'gc-%' GROUP BY id`, st.transfers)
	count(`SELECT transfer_id, count(*) FROM ledger_entries WHERE transfer_id LIKE 'gc-%' GROUP BY transfer_id`, st.entries)
	count(`SELECT substr(okey, 10), count(*) FROM idem_outbox WHERE type = 'transfer.created' GROUP BY okey`, st.events)
	count(`SELECT key, status FROM idem_keys WHERE key LIKE 'gc-%'`, st.answers)
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM idem_keys WHERE status = 0`).Scan(&st.claims); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT debits_posted FROM ledger_accounts WHERE id = 'bank'`).Scan(&st.bankDebits); err != nil {
		t.Fatal(err)
	}
	return st
}

// complete checks that nothing is half-applied: every stored answer has
// its transfer, entries and event, and every transfer its answer.
func (st gcCounts) complete(t *testing.T) {
	t.Helper()
	if st.claims != 0 {
		t.Errorf("%d keys claimed without an answer", st.claims)
	}
	for key, status := range st.answers {
		if status != 201 || st.transfers[key] != 1 || st.entries[key] != 2 || st.events[key] != 1 {
			t.Errorf("%s: answer %d with %d transfers, %d entries, %d events", key, status, st.transfers[key], st.entries[key], st.events[key])
		}
	}
	for key := range st.transfers {
		if st.answers[key] == 0 {
			t.Errorf("transfer %s has no stored answer", key)
		}
	}
	if int64(len(st.transfers)) != st.bankDebits {
		t.Errorf("%d transfers but the bank was debited %d", len(st.transfers), st.bankDebits)
	}
}
