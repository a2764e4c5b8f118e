package run

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Kind is an operation's kind.
type Kind string

// The operation kinds a run sends.
const (
	KindAccount  Kind = "account"
	KindTransfer Kind = "transfer"
	KindReversal Kind = "reversal"
	// KindWebhook is a Standard Webhooks delivery to POST
	// /v1/webhooks/{endpoint}: its Key and ID are the stable event id.
	KindWebhook Kind = "webhook"
	// KindHold is a hold: POST /v1/transfers with "pending": true and a
	// timeout, reserving Amount from Debit for Credit.
	KindHold Kind = "hold"
	// KindPost posts a hold (Holds): all of it when Amount is 0, else
	// Amount of it, the rest released.
	KindPost Kind = "post"
	// KindVoid voids a hold (Holds), releasing all of it.
	KindVoid Kind = "void"
	// KindExpiry is a hold's release by the service's expiry worker. No
	// run sends one and no journal holds one: the verifier stands one in
	// for each expiry it reads from the ledger, to check its event.
	KindExpiry Kind = "expiry"
)

// Op is one unique operation: one Idempotency-Key and one request body,
// sent one or more times. Its exported fields are what the journal keeps.
type Op struct {
	Kind Kind   `json:"kind"`
	Key  string `json:"key"`
	// ID is the resource id the request names explicitly, so a verifier
	// can look the resource up even when no answer ever arrived.
	ID   string `json:"id"`
	Path string `json:"path"`
	// Body is the request body exactly as sent by every copy.
	Body     string `json:"body"`
	Currency string `json:"currency"`
	// Debit and Credit are the accounts the operation debits and credits
	// (for a reversal: the original's credit and debit accounts).
	Debit  string `json:"debit,omitempty"`
	Credit string `json:"credit,omitempty"`
	Amount int64  `json:"amount,omitempty"`
	// Reverses is a reversal's original transfer.
	Reverses string `json:"reverses,omitempty"`
	// Type is a webhook delivery's event type (the body's "type").
	Type string `json:"type,omitempty"`
	// Holds is the hold a post or void settles.
	Holds string `json:"holds,omitempty"`
	// TimeoutSeconds is a hold's timeout.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
	// Status and Answer are the first final answer (0 and "" when none
	// arrived: the operation is unresolved).
	Status int    `json:"status"`
	Answer string `json:"answer,omitempty"`
	// Copies is how many copies were sent (retries not counted).
	Copies int `json:"copies"`

	// Rival is sent at the same instant as the operation, each to the
	// next server of the pool: a post racing a void of the same hold.
	// The journal keeps both as operations of their own.
	Rival *Op `json:"-"`

	mu sync.Mutex
	// attempts counts the requests sent for a webhook delivery, to give
	// each its own timestamp and signature.
	attempts int
}

// Acknowledged reports whether the service gave the operation a final answer.
func (o *Op) Acknowledged() bool { return o.Status != 0 }

// Acked is Acknowledged under the operation's lock, for while copies of it
// are in flight.
func (o *Op) Acked() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.Status != 0
}

// AddCopies counts n more copies sent.
func (o *Op) AddCopies(n int) {
	o.mu.Lock()
	o.Copies += n
	o.mu.Unlock()
}

// Keep keeps status and answer when they are the operation's first final
// answer, and returns the first one (these or the earlier) and whether it
// was these.
func (o *Op) Keep(status int, answer string) (firstStatus int, firstAnswer string, first bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	first = o.Status == 0
	if first {
		o.Status, o.Answer = status, answer
	}
	return o.Status, o.Answer, first
}

// Unanswered is a copy of o's request without its answer: how the
// verifier checks an operation whose acknowledgement the service lost.
func (o *Op) Unanswered() *Op {
	return &Op{Kind: o.Kind, Key: o.Key, ID: o.ID, Path: o.Path, Body: o.Body, Currency: o.Currency,
		Debit: o.Debit, Credit: o.Credit, Amount: o.Amount, Reverses: o.Reverses, Type: o.Type,
		Holds: o.Holds, TimeoutSeconds: o.TimeoutSeconds, Copies: o.Copies}
}

// Applied reports whether the final answer says the work was done.
func (o *Op) Applied() bool { return o.Status >= 200 && o.Status < 300 }

// JournalVersion is the journal format's version.
const JournalVersion = 1

// Journal is what a run recorded: enough for Verify to check the service
// again later (idem load verify).
type Journal struct {
	Version int       `json:"version"`
	RunID   string    `json:"run_id"`
	Targets []string  `json:"targets"`
	Started time.Time `json:"started"`
	Ops     []*Op     `json:"ops"`
}

// WriteFile writes the journal as JSON, through a temporary file so a
// crash never leaves half a journal.
func (j *Journal) WriteFile(path string) error {
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("load: encode journal: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("load: write journal: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("load: write journal: %w", err)
	}
	return nil
}

// maxJournalBytes bounds a journal read back.
const maxJournalBytes = 1 << 30

// ReadJournal reads a journal written by WriteFile.
func ReadJournal(path string) (*Journal, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load: journal: %w", err)
	}
	if fi.Size() > maxJournalBytes {
		return nil, fmt.Errorf("load: journal %s is %d bytes; at most %d", path, fi.Size(), maxJournalBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load: journal: %w", err)
	}
	var j Journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("load: journal %s: %w", path, err)
	}
	if j.Version != JournalVersion {
		return nil, fmt.Errorf("load: journal %s has version %d; this idem reads version %d", path, j.Version, JournalVersion)
	}
	if j.RunID == "" {
		return nil, errors.New("load: journal has no run id")
	}
	for i, o := range j.Ops {
		if o == nil || o.Key == "" || o.ID == "" || o.Path == "" {
			return nil, fmt.Errorf("load: journal op %d is incomplete", i)
		}
	}
	return &j, nil
}
