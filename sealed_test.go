package idem_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/internal/sealtest"
	"github.com/idemhq/idem/seal"
)

// sealMarker is in answers whose plaintext must never be stored.
const sealMarker = "MARKER-4111111111111111"

// markerWork answers with sealMarker in the body and in a header.
func markerWork(runs *atomic.Int64, id string) idem.Work {
	return func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		runs.Add(1)
		if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ($1, $2)`, id, "sealed"); err != nil {
			return idem.Outcome{}, err
		}
		return idem.Outcome{Status: 201,
			Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/things/" + sealMarker}},
			Body:   []byte(`{"id":"` + id + `","card":"` + sealMarker + `"}`)}, nil
	}
}

// A keeper with a Sealer stores no plaintext of its answers — Do, DoTx and
// a Batcher alike — and replays them as they were answered.
func TestSealedOutcomesAtRest(t *testing.T) {
	sealtest.Each(t, func(t *testing.T, d driver.Driver, dir string) {
		setup(t, d)
		ctx := context.Background()
		k := newKeeper(t, d, idem.Config{Sealer: sealtest.New()})
		var runs atomic.Int64

		first, err := k.Do(ctx, req("do", `{}`), markerWork(&runs, "do"))
		if err != nil || !strings.Contains(string(first.Body), sealMarker) {
			t.Fatalf("first: %v %q", err, first.Body)
		}
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.DoTx(ctx, tx, req("dotx", `{}`), markerWork(&runs, "dotx")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := idem.NewBatcher(k, func(ctx context.Context, tx driver.Tx, items []string) ([]idem.ItemResult, error) {
			out := make([]idem.ItemResult, len(items))
			for i, id := range items {
				o, err := markerWork(&runs, id)(ctx, tx)
				if err != nil {
					return nil, err
				}
				out[i] = idem.ItemResult{Outcome: o}
			}
			return out, nil
		}, idem.BatchConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Do(ctx, req("batch", `{}`), "batch"); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}

		for _, key := range []string{"do", "dotx", "batch"} {
			res, err := k.Do(ctx, req(key, `{}`), markerWork(&runs, "again"))
			if err != nil {
				t.Fatalf("replay %s: %v", key, err)
			}
			want := `{"id":"` + key + `","card":"` + sealMarker + `"}`
			if !res.Replayed || res.Status != 201 || string(res.Body) != want ||
				res.Header.Get("Location") != "/v1/things/"+sealMarker {
				t.Fatalf("replay %s: replayed=%v %d %q %v", key, res.Replayed, res.Status, res.Body, res.Header)
			}
			rec, err := k.Lookup(ctx, req(key, `{}`).Key)
			if err != nil || string(rec.Outcome.Body) != want {
				t.Fatalf("lookup %s: %v %q", key, err, rec.Outcome.Body)
			}
		}
		if runs.Load() != 3 || countRows(t, d, "biz") != 3 {
			t.Fatalf("runs %d, biz rows %d; want 3, 3", runs.Load(), countRows(t, d, "biz"))
		}
		var sealed int
		if err := d.Reader().QueryRow(ctx, `SELECT count(*) FROM idem_keys WHERE sealed AND header IS NULL`).Scan(&sealed); err != nil || sealed != 3 {
			t.Fatalf("sealed rows %d (%v), want 3", sealed, err)
		}
		if n := sealtest.Absent(t, d, dir, sealMarker, "idem_keys"); d.Dialect() == "postgres" && n != 3 {
			t.Fatalf("read %d rows of idem_keys, want 3", n)
		}

		// The control: without a Sealer the same answer is found at rest.
		plain := newKeeper(t, d, idem.Config{})
		if _, err := plain.Do(ctx, req("plain", `{}`), markerWork(&runs, "plain")); err != nil {
			t.Fatal(err)
		}
		sealtest.Present(t, d, dir, sealMarker, "idem_keys")
	})
}

// Records stored before a Sealer was set still replay under it; a sealed
// record read by a keeper without one fails, never answering ciphertext.
func TestSealedMixedRecords(t *testing.T) {
	sealtest.Each(t, func(t *testing.T, d driver.Driver, _ string) {
		setup(t, d)
		ctx := context.Background()
		var runs atomic.Int64
		plain := newKeeper(t, d, idem.Config{})
		if _, err := plain.Do(ctx, req("before", `{}`), markerWork(&runs, "before")); err != nil {
			t.Fatal(err)
		}
		sealed := newKeeper(t, d, idem.Config{Sealer: sealtest.New()})
		res, err := sealed.Do(ctx, req("before", `{}`), markerWork(&runs, "x"))
		if err != nil || !res.Replayed || !strings.Contains(string(res.Body), `"id":"before"`) ||
			res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("plaintext record under a Sealer: %v replayed=%v %q", err, res.Replayed, res.Body)
		}
		if _, err := sealed.Do(ctx, req("after", `{}`), markerWork(&runs, "after")); err != nil {
			t.Fatal(err)
		}
		res, err = plain.Do(ctx, req("after", `{}`), markerWork(&runs, "x"))
		if !errors.Is(err, idem.ErrNoSealer) || res.Body != nil {
			t.Fatalf("sealed record without a Sealer: %v %q; want ErrNoSealer and no answer", err, res.Body)
		}
		if _, err := plain.Lookup(ctx, req("after", `{}`).Key); !errors.Is(err, idem.ErrNoSealer) {
			t.Fatalf("lookup without a Sealer: %v", err)
		}
		if runs.Load() != 2 {
			t.Fatalf("runs %d, want 2", runs.Load())
		}
	})
}

// A sealed outcome moved to another key's row fails to open: the
// associated data binds it to its table, tenant and key.
func TestSealedSwappedRows(t *testing.T) {
	sealtest.Each(t, func(t *testing.T, d driver.Driver, _ string) {
		setup(t, d)
		ctx := context.Background()
		k := newKeeper(t, d, idem.Config{Sealer: sealtest.New()})
		var runs atomic.Int64
		for _, key := range []string{"a", "b"} {
			if _, err := k.Do(ctx, req(key, `{}`), markerWork(&runs, key)); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `UPDATE idem_keys SET body = (SELECT body FROM idem_keys WHERE key = 'b') WHERE key = 'a'`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := k.Do(ctx, req("a", `{}`), markerWork(&runs, "again"))
		if !errors.Is(err, seal.ErrAuthentication) || res.Body != nil {
			t.Fatalf("swapped row: %v %q; want seal.ErrAuthentication", err, res.Body)
		}
		if res, err := k.Do(ctx, req("b", `{}`), markerWork(&runs, "again")); err != nil || !strings.Contains(string(res.Body), `"id":"b"`) {
			t.Fatalf("the row left alone: %v %q", err, res.Body)
		}
		if runs.Load() != 2 {
			t.Fatalf("runs %d, want 2", runs.Load())
		}
	})
}

// A forgotten tenant's stored answers are ErrForgotten on replay: nothing
// runs again, and other tenants replay as before.
func TestSealedForgottenTenant(t *testing.T) {
	sealtest.Each(t, func(t *testing.T, d driver.Driver, _ string) {
		setup(t, d)
		ctx := context.Background()
		s := sealtest.New()
		k := newKeeper(t, d, idem.Config{Sealer: s})
		var runs atomic.Int64
		other := req("k", `{}`)
		other.Key.Scope = "tenant-b"
		for _, r := range []idem.Request{req("k", `{}`), other} {
			if _, err := k.Do(ctx, r, markerWork(&runs, r.Key.Scope)); err != nil {
				t.Fatal(err)
			}
		}
		s.Forget("tenant-a")
		res, err := k.Do(ctx, req("k", `{}`), markerWork(&runs, "again"))
		if !errors.Is(err, idem.ErrForgotten) || res.Body != nil {
			t.Fatalf("forgotten tenant: %v %q; want ErrForgotten", err, res.Body)
		}
		// A different request under the key is refused the same way: its
		// stored answer cannot be read to tell.
		if _, err := k.Do(ctx, req("k", `{"other":1}`), markerWork(&runs, "again")); !errors.Is(err, idem.ErrForgotten) {
			t.Fatalf("forgotten tenant, other request: %v", err)
		}
		if res, err := k.Do(ctx, other, markerWork(&runs, "again")); err != nil || !res.Replayed {
			t.Fatalf("the other tenant: %v", err)
		}
		if runs.Load() != 2 || countRows(t, d, "biz") != 2 {
			t.Fatalf("runs %d, biz rows %d; want 2, 2", runs.Load(), countRows(t, d, "biz"))
		}
	})
}

// A keeper sealing with a real Envelope (idem serve's Sealer) stores a
// tenant's first outcome although the Envelope must first store the
// tenant's data key: it does so before the keeper's transaction begins
// (seal.Preparer), not inside it, where on SQLite it would wait for the
// writer that transaction holds until the deadline. Every tenant's
// outcomes replay.
func TestSealedWithEnvelopeFirstOutcome(t *testing.T) {
	sealtest.Each(t, func(t *testing.T, d driver.Driver, _ string) {
		setup(t, d)
		src, err := seal.ParseKeyFile("keys", []byte("k1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, seal.DataKeyBytes))+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		env, err := seal.New(d, src, seal.Config{})
		if err != nil {
			t.Fatal(err)
		}
		k := newKeeper(t, d, idem.Config{Sealer: env})
		var runs atomic.Int64
		for _, tenant := range []string{"tenant-a", "tenant-b"} {
			r := req(tenant+"-first", `{}`)
			r.Key.Scope = tenant
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			first, err := k.Do(ctx, r, markerWork(&runs, tenant))
			if err != nil {
				cancel()
				t.Fatalf("%s's first outcome: %v", tenant, err)
			}
			again, err := k.Do(ctx, r, markerWork(&runs, tenant))
			cancel()
			if err != nil || !again.Replayed || !bytes.Equal(again.Body, first.Body) {
				t.Fatalf("%s's replay: %v %v %q, want %q", tenant, err, again.Replayed, again.Body, first.Body)
			}
		}
		if runs.Load() != 2 {
			t.Fatalf("work ran %d times for two keys", runs.Load())
		}
		if rows := countRows(t, d, "idem_data_keys"); rows != 2 {
			t.Fatalf("%d data keys for two tenants", rows)
		}
	})
}
