package idem

import (
	"context"
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
	// StoreBody, when set, is what the outcome's body becomes when it is
	// stored, and so in every replay (idemhttp's RedactFields leaves
	// fields out this way); copies that join the first in this process get
	// it too. The first answer is not changed. An error fails the request
	// as the work's would: everything rolls back, nothing is stored.
	StoreBody func(body []byte) ([]byte, error)
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
// c keeps, sealed when the keeper has a Sealer.
func (k *Keeper) record(ctx context.Context, c claimant, out Outcome) (driver.KeyRecordParams, error) {
	header, err := encodeHeader(out.Header, c.keep)
	if err != nil {
		return driver.KeyRecordParams{}, fmt.Errorf("idem: encode outcome header of key %q: %w", c.key.Key, err)
	}
	body := out.Body
	if c.storeBody != nil {
		var err error
		if body, err = c.storeBody(body); err != nil {
			return driver.KeyRecordParams{}, fmt.Errorf("idem: the body to store of key %q: %w", c.key.Key, err)
		}
	}
	p := driver.KeyRecordParams{ID: c.key.id(), Status: out.Status, Header: header, Body: body}
	if err := k.sealRecord(ctx, c.key, &p); err != nil {
		return driver.KeyRecordParams{}, err
	}
	return p, nil
}

// replay turns a stored record into a replayed result, or a *ReusedError
// when the request differs from the one stored. A record past its
// retention, or a tombstone, replays nothing: ErrKeyExpired for the same
// request, a *ReusedError (with the stored status only) for another. A
// record that cannot be opened (a forgotten tenant: seal.ErrForgotten) is
// that error, whatever the request: nothing is run again.
func (k *Keeper) replay(ctx context.Context, key Key, rec *driver.KeyRecord, fp []byte, now time.Time) (Result, error) {
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
	out, err := k.storedOutcome(ctx, key, rec)
	if err != nil {
		return Result{}, err
	}
	if string(rec.Fingerprint) != string(fp) {
		return Result{}, &ReusedError{Key: key, Stored: out}
	}
	return Result{Outcome: out, Replayed: true, ExpiresAt: rec.ExpiresAt}, nil
}

// storedOutcome is a record's outcome, opened, with its header decoded.
func (k *Keeper) storedOutcome(ctx context.Context, key Key, rec *driver.KeyRecord) (Outcome, error) {
	header, body, err := k.openRecord(ctx, key, rec)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Status: rec.Status, Body: body}
	if len(header) > 0 {
		h, err := decodeHeader(header)
		if err != nil {
			return Outcome{}, fmt.Errorf("idem: decode stored header of key %q: %w", key.Key, err)
		}
		out.Header = h
	}
	return out, nil
}
