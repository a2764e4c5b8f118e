package load

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/load/run"
)

// reversalShare is the share of main-phase operations that are reversals
// (of transfers already acknowledged with 201).
const reversalShare = 0.2

// maxAmount bounds a generated transfer's amount in minor units.
const maxAmount = 10_000

// generator makes the run's operations. Ids are explicit and prefixed with
// the run id, so a run against a busy deployment touches only its own
// resources and a verifier can find a resource even when its answer was lost.
type generator struct {
	runID        string
	refusedShare float64
	// webhookEndpoint, when set, makes webhookShare of the main phase's
	// operations webhook deliveries to it.
	webhookEndpoint string
	webhookShare    float64
	// holdShare of the main phase's operations are holds and their
	// settlements, each hold with holdTimeout seconds.
	holdShare   float64
	holdTimeout int64
	rnd         *rand.Rand // used by the one goroutine that generates

	accounts   map[string][]string // currency → acknowledged account ids
	currencies []string
	transfers  int
	reversals  int
	webhooks   int
	holds      int
	settles    int

	mu         sync.Mutex
	reversible []*run.Op // transfers acknowledged with 201, not yet reversed
	settleable []*run.Op // holds acknowledged with 201, not yet settled
}

func newGenerator(cfg run.Config, runID string, seed uint64) *generator {
	g := &generator{runID: runID, refusedShare: cfg.RefusedShare,
		rnd: rand.New(rand.NewPCG(seed, 3)), accounts: map[string][]string{}}
	if cfg.WebhookEndpoint != "" {
		g.webhookEndpoint, g.webhookShare = cfg.WebhookEndpoint, cfg.WebhookShare
	}
	g.holdShare, g.holdTimeout = cfg.HoldShare, int64(cfg.HoldTimeout/time.Second)
	return g
}

var currencies = []string{"EUR", "USD"}

// account makes account i: currencies alternate, so each has at least two
// accounts when there are four or more.
func (g *generator) account(i int, total int) *run.Op {
	cur := currencies[0]
	if total >= 4 {
		cur = currencies[i%len(currencies)]
	}
	id := fmt.Sprintf("%s-a%d", g.runID, i)
	return &run.Op{Kind: run.KindAccount, Key: fmt.Sprintf("%s-acct-%d", g.runID, i), ID: id,
		Path: "/v1/accounts", Currency: cur, Body: mustJSON(map[string]any{"id": id, "currency": cur})}
}

// useAccount makes an acknowledged account available to transfers.
func (g *generator) useAccount(o *run.Op) {
	if len(g.accounts[o.Currency]) == 0 {
		g.currencies = append(g.currencies, o.Currency)
	}
	g.accounts[o.Currency] = append(g.accounts[o.Currency], o.ID)
}

// ready reports whether some currency has two accounts to move money between.
func (g *generator) ready() bool {
	for _, ids := range g.accounts {
		if len(ids) >= 2 {
			return true
		}
	}
	return false
}

// next makes the next main-phase operation.
func (g *generator) next() *run.Op {
	if g.webhookEndpoint != "" && g.rnd.Float64() < g.webhookShare {
		return g.webhookDelivery()
	}
	if g.holdShare > 0 && g.rnd.Float64() < g.holdShare {
		return g.holdOp()
	}
	if g.rnd.Float64() < reversalShare {
		if o := g.reversal(); o != nil {
			return o
		}
	}
	return g.transfer()
}

// pair picks a currency with two accounts or more and two of its accounts.
func (g *generator) pair() (cur, debit, credit string) {
	for {
		cur = g.currencies[g.rnd.IntN(len(g.currencies))]
		if len(g.accounts[cur]) >= 2 {
			break
		}
	}
	ids := g.accounts[cur]
	i := g.rnd.IntN(len(ids))
	j := (i + 1 + g.rnd.IntN(len(ids)-1)) % len(ids)
	return cur, ids[i], ids[j]
}

func (g *generator) transfer() *run.Op {
	g.transfers++
	n := g.transfers
	cur, debit, credit := g.pair()
	if len(g.currencies) > 1 && g.rnd.Float64() < g.refusedShare {
		// A transfer built to be refused: the credit account holds another
		// currency. Its 422 must be stored and replayed, and nothing moved.
		for _, c := range g.currencies {
			if c != cur {
				other := g.accounts[c]
				credit = other[g.rnd.IntN(len(other))]
				break
			}
		}
	}
	id := fmt.Sprintf("%s-t%d", g.runID, n)
	amount := 1 + g.rnd.Int64N(maxAmount)
	return &run.Op{Kind: run.KindTransfer, Key: fmt.Sprintf("%s-tk%d", g.runID, n), ID: id, Path: "/v1/transfers",
		Currency: cur, Debit: debit, Credit: credit, Amount: amount,
		Body: mustJSON(map[string]any{"id": id, "debit_account_id": debit, "credit_account_id": credit,
			"amount": amount, "currency": cur})}
}

// reversal reverses part or all of a random reversible transfer; nil when
// none is reversible yet.
func (g *generator) reversal() *run.Op {
	g.mu.Lock()
	if len(g.reversible) == 0 {
		g.mu.Unlock()
		return nil
	}
	i := g.rnd.IntN(len(g.reversible))
	t := g.reversible[i]
	g.reversible[i] = g.reversible[len(g.reversible)-1]
	g.reversible = g.reversible[:len(g.reversible)-1]
	g.mu.Unlock()

	g.reversals++
	n := g.reversals
	id := fmt.Sprintf("%s-r%d", g.runID, n)
	amount := 1 + g.rnd.Int64N(t.Amount)
	return &run.Op{Kind: run.KindReversal, Key: fmt.Sprintf("%s-rk%d", g.runID, n), ID: id,
		Path: "/v1/transfers/" + t.ID + "/reversals", Currency: t.Currency,
		Debit: t.Credit, Credit: t.Debit, Amount: amount, Reverses: t.ID,
		Body: mustJSON(map[string]any{"id": id, "amount": amount, "reason": "idem load"})}
}

// acknowledged offers a transfer that was applied for reversal, and a
// hold for settlement.
func (g *generator) acknowledged(o *run.Op) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch o.Kind {
	case run.KindTransfer:
		g.reversible = append(g.reversible, o)
	case run.KindHold:
		g.settleable = append(g.settleable, o)
	}
}

// holdOp makes the holds mix's next operation: half the time, when a hold
// is acknowledged and unsettled, a settlement of it, else a new hold. A
// hold taken for settlement is posted in full (25%) or in part (25%),
// voided (20%), posted and voided at the same instant under two keys, to
// two servers (20%), or left to expire (10%: a new hold is made instead).
func (g *generator) holdOp() *run.Op {
	g.mu.Lock()
	var h *run.Op
	if len(g.settleable) > 0 && g.rnd.IntN(2) == 0 {
		i := g.rnd.IntN(len(g.settleable))
		h = g.settleable[i]
		g.settleable[i] = g.settleable[len(g.settleable)-1]
		g.settleable = g.settleable[:len(g.settleable)-1]
	}
	g.mu.Unlock()
	if h == nil {
		return g.hold()
	}
	switch r := g.rnd.IntN(100); {
	case r < 25:
		return g.settlement(h, run.KindPost, 0)
	case r < 50 && h.Amount > 1:
		return g.settlement(h, run.KindPost, 1+g.rnd.Int64N(h.Amount-1))
	case r < 70:
		return g.settlement(h, run.KindVoid, 0)
	case r < 90:
		p, v := g.settlement(h, run.KindPost, 0), g.settlement(h, run.KindVoid, 0)
		if g.rnd.IntN(2) == 0 {
			p.Rival = v
			return p
		}
		v.Rival = p
		return v
	}
	return g.hold()
}

// hold makes a hold of a random amount between two accounts of a currency.
func (g *generator) hold() *run.Op {
	g.holds++
	n := g.holds
	cur, debit, credit := g.pair()
	id := fmt.Sprintf("%s-h%d", g.runID, n)
	amount := 1 + g.rnd.Int64N(maxAmount)
	return &run.Op{Kind: run.KindHold, Key: fmt.Sprintf("%s-hk%d", g.runID, n), ID: id, Path: "/v1/transfers",
		Currency: cur, Debit: debit, Credit: credit, Amount: amount, TimeoutSeconds: g.holdTimeout,
		Body: mustJSON(map[string]any{"id": id, "debit_account_id": debit, "credit_account_id": credit,
			"amount": amount, "currency": cur, "pending": true, "timeout_seconds": g.holdTimeout})}
}

// settlement posts (amount 0: all of it) or voids hold h under a key and
// id of its own.
func (g *generator) settlement(h *run.Op, kind run.Kind, amount int64) *run.Op {
	g.settles++
	n := g.settles
	id := fmt.Sprintf("%s-s%d", g.runID, n)
	body := map[string]any{"id": id}
	if amount > 0 {
		body["amount"] = amount
	}
	return &run.Op{Kind: kind, Key: fmt.Sprintf("%s-sk%d", g.runID, n), ID: id,
		Path: "/v1/transfers/" + url.PathEscape(h.ID) + "/" + string(kind), Currency: h.Currency,
		Debit: h.Debit, Credit: h.Credit, Amount: amount, Holds: h.ID, Body: mustJSON(body)}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and integers always encode
	}
	return string(b)
}

// webhookTypes are the event types deliveries carry, in turn.
var webhookTypes = []string{"load.order.paid", "load.order.refunded", "load.ping"}

// webhookDelivery makes delivery n to the endpoint: a stable, run-prefixed
// event id (which is also the operation's key) and a JSON body with a type.
func (g *generator) webhookDelivery() *run.Op {
	g.webhooks++
	n := g.webhooks
	id := fmt.Sprintf("%s-w%d", g.runID, n)
	typ := webhookTypes[n%len(webhookTypes)]
	amount := 1 + g.rnd.Int64N(maxAmount)
	return &run.Op{Kind: run.KindWebhook, Key: id, ID: id, Path: "/v1/webhooks/" + url.PathEscape(g.webhookEndpoint),
		Type: typ, Amount: amount,
		Body: mustJSON(map[string]any{"type": typ, "timestamp": "2026-01-01T00:00:00Z",
			"data": map[string]any{"order_id": fmt.Sprintf("%s-o%d", g.runID, n), "amount": amount}})}
}
