package idem_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/drivertest"
)

// Lookup returns the stored record as public types: the outcome's header
// decoded as a replay gets it, multi-valued headers included, with the
// record's fingerprint and times; no record and an expired one are
// ErrNotFound.
func TestLookup(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		setup(t, d)
		now := time.Date(2026, 11, 29, 14, 2, 0, 0, time.UTC)
		k := newKeeper(t, d, idem.Config{Retention: time.Hour, Clock: func() time.Time { return now }})
		ctx := context.Background()
		r := req("look-1", `{"amount":5}`)
		header := http.Header{"Content-Type": {"application/json"}, "Link": {"</a>; rel=a", "</b>; rel=b"}}
		if _, err := k.Do(ctx, r, func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ($1, $2)`, "look-1", "done"); err != nil {
				return idem.Outcome{}, err
			}
			return idem.Outcome{Status: 201, Header: header, Body: []byte(`{"id":"t1"}`)}, nil
		}); err != nil {
			t.Fatal(err)
		}

		rec, err := k.Lookup(ctx, r.Key)
		if err != nil {
			t.Fatal(err)
		}
		fp, err := idem.Fingerprint(r.Key.Operation, r.Body)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Key != r.Key || !bytes.Equal(rec.Fingerprint, fp) {
			t.Fatalf("record names %+v with fingerprint %x; want %+v, %x", rec.Key, rec.Fingerprint, r.Key, fp)
		}
		if rec.Outcome.Status != 201 || string(rec.Outcome.Body) != `{"id":"t1"}` ||
			rec.Outcome.Header.Get("Content-Type") != "application/json" ||
			!slices.Equal(rec.Outcome.Header.Values("Link"), header["Link"]) {
			t.Fatalf("outcome %d %q %v; want 201, the body and %v", rec.Outcome.Status, rec.Outcome.Body, rec.Outcome.Header, header)
		}
		if !rec.CreatedAt.Equal(now) || !rec.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("times %s .. %s; want %s .. +1h", rec.CreatedAt, rec.ExpiresAt, now)
		}
		if got := countRows(t, d, "biz"); got != 1 {
			t.Fatalf("biz rows %d, want 1", got)
		}

		missing := r.Key
		missing.Key = "never-sent"
		if _, err := k.Lookup(ctx, missing); !errors.Is(err, idem.ErrNotFound) || !errors.Is(err, driver.ErrNotFound) {
			t.Fatalf("unknown key: %v, want ErrNotFound", err)
		}
		now = now.Add(time.Hour)
		if _, err := k.Lookup(ctx, r.Key); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("expired key: %v, want ErrNotFound", err)
		}
	})
}
