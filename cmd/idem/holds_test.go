package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/idemclient"
)

// Holds expire while the server expiring them is killed just before its
// commit: the next server releases each once, and each one's
// transfer.expired event exists once.
func TestHoldExpiryUnderSIGKILL(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		db := dbURL(t, dialect)
		stuck := start(t, []string{"IDEM_FAILPOINT=ledger.before_expiry_commit"},
			"serve", "--addr", "127.0.0.1:0", "--db", db, "--hold-expiry-period", "50ms", "--relay-lease", "1s")
		account(t, stuck.URL, "w", "EUR")
		account(t, stuck.URL, "m", "EUR")
		const holds = 5
		for i := range holds {
			h := transfer("w", "m", 10)
			h["id"], h["pending"], h["timeout_seconds"] = fmt.Sprintf("h%d", i), true, 1
			mustStatus(t, call(t, "POST", stuck.URL+"/v1/transfers", fmt.Sprintf("hold-%d", i), h), http.StatusCreated)
		}
		// The expiry of the due holds stops before its commit; kill it
		// there. (Its relay's leases last 1s: the next relay takes over
		// its shards soon after.)
		waitFor(t, func() bool { return strings.Contains(stuck.Stderr(), "failpoint: ledger.before_expiry_commit") })
		if err := stuck.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		stuck.wait(30 * time.Second)

		after := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--hold-expiry-period", "50ms", "--relay-lease", "1s")
		expired := func() []map[string]any {
			var page struct {
				Data []map[string]any `json:"data"`
			}
			r := call(t, "GET", after.URL+"/v1/events?limit=1000", "", nil)
			mustStatus(t, r, http.StatusOK)
			if err := json.Unmarshal(r.Body, &page); err != nil {
				t.Fatal(err)
			}
			var out []map[string]any
			for _, e := range page.Data {
				if e["type"] == "transfer.expired" && e["published_at"] != nil {
					out = append(out, e)
				}
			}
			return out
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(expired()) < holds {
			if time.Now().After(deadline) {
				t.Fatalf("events: %s\nh0: %s", call(t, "GET", after.URL+"/v1/events?limit=1000", "", nil).Body,
					call(t, "GET", after.URL+"/v1/transfers/h0", "", nil).Body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // a few more expiry passes: nothing more to expire
		events := expired()
		keys := map[any]bool{}
		for _, e := range events {
			p, _ := e["payload"].(map[string]any)
			keys[p["pending_id"]] = true
		}
		if len(events) != holds || len(keys) != holds {
			t.Fatalf("%d transfer.expired events for %d holds (of holds %v)", len(events), holds, keys)
		}
		for i := range holds {
			h := call(t, "GET", fmt.Sprintf("%s/v1/transfers/h%d", after.URL, i), "", nil).json(t)
			if h["status"] != "expired" {
				t.Fatalf("h%d: %v", i, h)
			}
		}
		w := call(t, "GET", after.URL+"/v1/accounts/w", "", nil).json(t)
		if w["debits_pending"] != float64(0) || w["debits_posted"] != float64(0) {
			t.Fatalf("w: %v", w)
		}
		open := call(t, "GET", after.URL+"/v1/transfers?status=pending", "", nil).json(t)
		if d, _ := open["data"].([]any); len(d) != 0 {
			t.Fatalf("open holds: %v", open)
		}
	})
}

// The Go client's hold calls: reserve, list the open holds, post part,
// and a second settlement refused with its code.
func TestClientHolds(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		p, _ := serveDB(t, dialect, nil)
		ctx := t.Context()
		c, err := idemclient.New(idemclient.Config{BaseURL: p.URL})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"w", "m"} {
			if _, err := c.CreateAccount(ctx, idemclient.AccountParams{ID: id, Currency: "EUR"}); err != nil {
				t.Fatal(err)
			}
		}
		h, err := c.CreateTransfer(ctx, idemclient.TransferParams{ID: "h1", DebitAccountID: "w", CreditAccountID: "m",
			Amount: 80, Currency: "EUR", Pending: true, TimeoutSeconds: 3600})
		if err != nil || h.State != "pending" || !h.Pending || h.ExpiresAt == nil {
			t.Fatalf("hold: %+v, %v", h, err)
		}
		open, err := c.Transfers(ctx, idemclient.TransfersParams{Status: "pending", AccountID: "w"})
		if err != nil || len(open.Data) != 1 || open.Data[0].ID != "h1" {
			t.Fatalf("open holds: %+v, %v", open, err)
		}
		if w, err := c.GetAccount(ctx, "w"); err != nil || w.DebitsPending != 80 || w.Available != -80 {
			t.Fatalf("w: %+v, %v", w, err)
		}
		amount := int64(65)
		post, err := c.PostPending(ctx, "h1", idemclient.SettleParams{Amount: &amount}, idemclient.WithKey("capture-h1"))
		if err != nil || post.State != "posted" || post.PendingID != "h1" || post.Amount != 65 {
			t.Fatalf("post: %+v, %v", post, err)
		}
		if _, err := c.VoidPending(ctx, "h1", idemclient.SettleParams{}); !errors.Is(err, idemclient.ErrPendingAlreadyPosted) {
			t.Fatalf("void after post: %v", err)
		}
		if b, err := c.Balance(ctx, "w", nil); err != nil || b.DebitsPending != 0 || b.DebitsPosted != 65 || b.Available != -65 {
			t.Fatalf("w balance: %+v, %v", b, err)
		}
	})
}

// 50 posts and voids of one hold, each under its own key, race across two
// serve processes on one database: exactly one settles it, every other
// is refused with the code of what did, and one settlement row exists.
func TestHoldSettlesOnceAcrossServers(t *testing.T) {
	eachDialect(t, func(t *testing.T, dialect string) {
		db := dbURL(t, dialect)
		a := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db)
		// One relay is enough: the second would share the first's embedded
		// broker directory.
		b := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--db", db, "--relay=false")
		account(t, a.URL, "w", "EUR")
		account(t, a.URL, "m", "EUR")
		for round := range 2 {
			hold := fmt.Sprintf("h%d", round)
			h := transfer("w", "m", 100)
			h["id"], h["pending"] = hold, true
			mustStatus(t, call(t, "POST", a.URL+"/v1/transfers", "hold-"+hold, h), http.StatusCreated)
			const racers = 50
			answers := make([]response, racers)
			done := make(chan int, racers)
			for i := range racers {
				go func() {
					base, path, body := a.URL, "/post", any(map[string]any{"amount": 60})
					if i%2 == 1 {
						base = b.URL
					}
					if i%4 >= 2 {
						path, body = "/void", map[string]any{}
					}
					answers[i] = call(t, "POST", base+"/v1/transfers/"+hold+path, fmt.Sprintf("%s-settle-%d", hold, i), body)
					done <- i
				}()
			}
			for range racers {
				<-done
			}
			winner := -1
			for i, r := range answers {
				if r.Status == http.StatusCreated {
					if winner >= 0 {
						t.Fatalf("round %d: racers %d and %d both settled the hold", round, winner, i)
					}
					winner = i
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: nobody settled the hold: %d %s", round, answers[0].Status, answers[0].Body)
			}
			want := "pending_transfer_already_posted"
			if winner%4 >= 2 {
				want = "pending_transfer_already_voided"
			}
			for i, r := range answers {
				if i != winner && (r.Status != http.StatusUnprocessableEntity || r.code(t) != want) {
					t.Fatalf("round %d racer %d: %d %s, want 422 %s", round, i, r.Status, r.Body, want)
				}
			}
			got := call(t, "GET", b.URL+"/v1/transfers/"+hold, "", nil).json(t)
			if got["settled_by"] != answers[winner].json(t)["id"] {
				t.Fatalf("round %d: hold %v, winner %s", round, got, answers[winner].Body)
			}
		}
		w := call(t, "GET", b.URL+"/v1/accounts/w", "", nil).json(t)
		if w["debits_pending"] != float64(0) {
			t.Fatalf("w: %v", w)
		}
		all := call(t, "GET", a.URL+"/v1/transfers?limit=1000", "", nil).json(t)
		settlements := 0
		for _, x := range all["data"].([]any) {
			if x.(map[string]any)["pending_id"] != nil {
				settlements++
			}
		}
		if settlements != 2 {
			t.Fatalf("%d settlements of 2 holds: %v", settlements, all)
		}
	})
}
