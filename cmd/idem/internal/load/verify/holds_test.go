package verify

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemhq/idem/cmd/idem/internal/load/run"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// holdsCase is a run's hold, its post and its void, as the journal holds
// them, and the ledger's transfers as listed.
func holdsCase(t *testing.T) (*verifier, map[string]ledgerTransfer, time.Time) {
	t.Helper()
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	expires := at.Add(3 * time.Second)
	hold := &run.Op{Kind: run.KindHold, Key: "ld1-hk1", ID: "ld1-h1", Debit: "ld1-a0", Credit: "ld1-a2", Currency: "EUR",
		Amount: 100, TimeoutSeconds: 3, Status: 201,
		Answer: `{"id":"ld1-h1","amount":100,"pending":true,"created_at":"2026-12-06T10:00:00Z"}`}
	post := &run.Op{Kind: run.KindPost, Key: "ld1-sk1", ID: "ld1-s1", Holds: "ld1-h1", Debit: "ld1-a0", Credit: "ld1-a2",
		Currency: "EUR", Amount: 60, Status: 201,
		Answer: `{"id":"ld1-s1","amount":60,"pending_id":"ld1-h1","settles":"post","created_at":"2026-12-06T10:00:01Z"}`}
	void := &run.Op{Kind: run.KindVoid, Key: "ld1-sk2", ID: "ld1-s2", Holds: "ld1-h1", Debit: "ld1-a0", Credit: "ld1-a2",
		Currency: "EUR", Status: 422, Answer: `{"code":"pending_transfer_already_posted"}`}
	cfg := run.Config{}.WithDefaults()
	v := &verifier{cfg: cfg, st: run.NewStats(1), applied: map[*run.Op]bool{}, effects: map[string]effect{},
		open: map[string]pendingTotals{}, j: &run.Journal{RunID: "ld1", Ops: []*run.Op{hold, post, void}}}
	ts := map[string]ledgerTransfer{
		"ld1-h1": {ID: "ld1-h1", DebitAccountID: "ld1-a0", CreditAccountID: "ld1-a2", Amount: 100, Currency: "EUR",
			State: "posted", Pending: true, TimeoutSeconds: 3, ExpiresAt: &expires, SettledBy: "ld1-s1", CreatedAt: at},
		"ld1-s1": {ID: "ld1-s1", DebitAccountID: "ld1-a0", CreditAccountID: "ld1-a2", Amount: 60, Currency: "EUR",
			State: "posted", PendingID: "ld1-h1", Settles: "post", CreatedAt: at.Add(time.Second)},
	}
	return v, ts, at.Add(time.Minute)
}

func checks(v *verifier) []string {
	var out []string
	for _, viol := range v.st.Violations() {
		out = append(out, viol.Check+": "+viol.Detail)
	}
	return out
}

// The holds check passes a hold posted once (the racing void refused as
// already posted), records what the post moved, and fails on a ledger or
// answers that settle a hold twice, a hold left pending past its
// timeout, and a refusal naming a settlement that did not happen.
func TestCheckHolds(t *testing.T) {
	t.Parallel()
	t.Run("settled once", func(t *testing.T) {
		v, ts, now := holdsCase(t)
		v.checkHolds(ts, now)
		if got := checks(v); len(got) != 0 {
			t.Fatalf("violations: %v", got)
		}
		if e := v.effects["ld1-s1"]; e.posted != 60 || e.pending != -100 || v.effects["ld1-h1"].pending != 100 {
			t.Fatalf("effects: %+v", v.effects)
		}
		if len(v.open) != 0 {
			t.Fatalf("open holds: %+v", v.open)
		}
	})
	t.Run("ledger settles twice", func(t *testing.T) {
		v, ts, now := holdsCase(t)
		// The void applied too: a second settlement of the same hold.
		ts["ld1-s2"] = ledgerTransfer{ID: "ld1-s2", DebitAccountID: "ld1-a0", CreditAccountID: "ld1-a2", Amount: 100,
			Currency: "EUR", State: "voided", PendingID: "ld1-h1", Settles: "void", CreatedAt: ts["ld1-s1"].CreatedAt.Add(time.Second)}
		v.checkHolds(ts, now)
		want(t, checks(v), "hold_settled_twice", "refused_applied")
	})
	t.Run("answers settle twice", func(t *testing.T) {
		v, ts, now := holdsCase(t)
		// The void was answered 201 as well, though the ledger holds one.
		v.j.Ops[2].Status, v.j.Ops[2].Answer = 201, `{"id":"ld1-s2"}`
		v.checkHolds(ts, now)
		want(t, checks(v), "hold_settled_twice", "acknowledged_lost")
	})
	t.Run("stuck pending", func(t *testing.T) {
		v, ts, now := holdsCase(t)
		h := ts["ld1-h1"]
		h.State, h.SettledBy = "pending", ""
		ts["ld1-h1"] = h
		delete(ts, "ld1-s1")
		v.j.Ops = v.j.Ops[:1]
		v.checkHolds(ts, now)
		want(t, checks(v), "hold_stuck")
		if o := v.open["ld1-a0"]; o.debits != 100 || v.open["ld1-a2"].credits != 100 {
			t.Fatalf("open holds: %+v", v.open)
		}
	})
	t.Run("expired late", func(t *testing.T) {
		v, ts, now := holdsCase(t)
		h := ts["ld1-h1"]
		h.State, h.SettledBy = "expired", "x1"
		ts["ld1-h1"] = h
		delete(ts, "ld1-s1")
		ts["x1"] = ledgerTransfer{ID: "x1", DebitAccountID: "ld1-a0", CreditAccountID: "ld1-a2", Amount: 100, Currency: "EUR",
			State: "expired", PendingID: "ld1-h1", Settles: "expire", CreatedAt: h.ExpiresAt.Add(10 * time.Second)}
		v.j.Ops = v.j.Ops[:1]
		v.checkHolds(ts, now)
		want(t, checks(v), "hold_stuck")
		if len(v.expiries) != 1 || v.expiries[0].ID != "x1" {
			t.Fatalf("expiries: %+v", v.expiries)
		}
	})
	t.Run("refusal names another settlement", func(t *testing.T) {
		v, ts, now := holdsCase(t)
		v.j.Ops[2].Answer = `{"code":"pending_transfer_already_voided"}`
		v.checkHolds(ts, now)
		want(t, checks(v), "refusal_differs")
	})
}

// want fails unless got holds exactly the violations of the checks named.
func want(t *testing.T, got []string, checks ...string) {
	t.Helper()
	if len(got) != len(checks) {
		t.Fatalf("violations %v; want one each of %v", got, checks)
	}
	for _, c := range checks {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, c+": ")
		}
		if !found {
			t.Fatalf("violations %v; want %s", got, c)
		}
	}
}
