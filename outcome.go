package idem

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/idemhq/idem/driver"
)

// Request is one arrival of an operation.
type Request struct {
	Key Key
	// Body is fingerprinted (canonical JSON, see Fingerprint) together with
	// Key.Operation, unless Fingerprint is set.
	Body []byte
	// Fingerprint, when set, is used as is: for requests whose body is not
	// JSON, or that hash other parts of the request too.
	Fingerprint []byte
	// StoreHeaders, when not nil, names the only headers of the outcome
	// that are stored, and so replayed (KeepHeaders); nil stores the
	// outcome's Header as given. The first answer is not filtered.
	StoreHeaders []string
}

// Outcome is what an operation answered. It is stored with the key, for
// successes and business failures alike, and replayed to later copies.
type Outcome struct {
	Status int
	Header http.Header // stored as Request.StoreHeaders says
	Body   []byte
}

// Result is an Outcome and whether it was replayed from storage.
type Result struct {
	Outcome
	Replayed bool
	// ExpiresAt is when the stored outcome expires (Config.Retention):
	// until then it is immutable, so a cache of it (idemhttp's replay
	// cache) stays right without asking the database again. After it a
	// copy gets ErrKeyExpired until Config.Memory.
	ExpiresAt time.Time
}

// Work is an operation's work, run inside the transaction that claims its
// key. It writes through tx and returns the outcome to store; it must not
// commit or roll back tx. Returning an error means a transient failure, or
// a request refused by validation before any work: everything rolls back,
// nothing is stored, and the key stays free for the next request. A panic
// is recovered and becomes a *PanicError (see Do).
type Work func(ctx context.Context, tx driver.Tx) (Outcome, error)

// record is out as the driver stores it on c's claim, with the headers
// c keeps.
func record(c claimant, out Outcome) (driver.KeyRecordParams, error) {
	h := out.Header
	if c.keep != nil {
		h = make(http.Header, len(c.keep)) // only marshalled: no copy of the values
		for _, name := range c.keep {
			if vs := out.Header[name]; len(vs) > 0 {
				h[name] = vs
			}
		}
	}
	var header []byte
	if len(h) > 0 {
		var err error
		if header, err = json.Marshal(h); err != nil {
			return driver.KeyRecordParams{}, fmt.Errorf("idem: encode outcome header of key %q: %w", c.key.Key, err)
		}
	}
	return driver.KeyRecordParams{ID: c.key.id(), Status: out.Status, Header: header, Body: out.Body}, nil
}

// replay turns a stored record into a replayed result, or a *ReusedError
// when the request differs from the one stored. A record past its
// retention, or a tombstone, replays nothing: ErrKeyExpired for the same
// request, a *ReusedError (with the stored status only) for another.
func replay(key Key, rec *driver.KeyRecord, fp []byte, now time.Time) (Result, error) {
	if rec.Tombstone || !rec.ExpiresAt.After(now) {
		same := string(rec.Fingerprint) == string(fp)
		if rec.Tombstone {
			same = string(rec.Fingerprint) == string(driver.TombstoneFingerprint(fp))
		}
		if !same {
			return Result{}, &ReusedError{Key: key, Stored: Outcome{Status: rec.Status}}
		}
		return Result{}, ErrKeyExpired
	}
	out, err := storedOutcome(key, rec)
	if err != nil {
		return Result{}, err
	}
	if string(rec.Fingerprint) != string(fp) {
		return Result{}, &ReusedError{Key: key, Stored: out}
	}
	return Result{Outcome: out, Replayed: true, ExpiresAt: rec.ExpiresAt}, nil
}

// storedOutcome is a record's outcome with its header decoded.
func storedOutcome(key Key, rec *driver.KeyRecord) (Outcome, error) {
	out := Outcome{Status: rec.Status, Body: rec.Body}
	if len(rec.Header) > 0 {
		h, err := decodeHeader(rec.Header)
		if err != nil {
			return Outcome{}, fmt.Errorf("idem: decode stored header of key %q: %w", key.Key, err)
		}
		out.Header = h
	}
	return out, nil
}
