package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/netfault"
	"github.com/idemhq/idem/internal/testpg"
)

// A Do whose COMMIT's answer is lost on the network returns
// ErrCommitUnknown, which neither IsRetryable nor ErrUnavailable claims
// ("nothing stored"): the work did commit. The retry with the same key
// replays it, the work run once.
func TestDoCommitAnswerLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, err := url.Parse(testpg.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	q := u.Query()
	q.Set("sslmode", "disable") // the proxy reads the COMMIT in the clear
	u.RawQuery = q.Encode()
	d, err := postgres.Open(ctx, postgres.Config{URL: u.String(), SearchPath: testpg.Schema(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	setup(t, d)
	k := newKeeper(t, d, idem.Config{})

	var runs atomic.Int64
	// The outcome travels with COMMIT in one pipeline of prepared
	// statements, whose text is not sent again: the outcome's body marks
	// the message that runs them both.
	proxy.DropAnswer([]byte(`{"id":1}`))
	work := func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		runs.Add(1)
		if _, err := tx.Exec(ctx, `INSERT INTO biz (k, note) VALUES ('x', 'the work')`); err != nil {
			return idem.Outcome{}, err
		}
		return idem.Outcome{Status: 201, Body: []byte(`{"id":1}`)}, nil
	}
	_, err = k.Do(ctx, req("lost", `{"n":1}`), work)
	if !errors.Is(err, idem.ErrCommitUnknown) || errors.Is(err, idem.ErrUnavailable) || idem.IsRetryable(err) {
		t.Fatalf("Do with its commit's answer lost: %v; want ErrCommitUnknown, not retryable", err)
	}
	res, err := k.Do(ctx, req("lost", `{"n":1}`), work)
	if err != nil || !res.Replayed || string(res.Body) != `{"id":1}` || runs.Load() != 1 || countRows(t, d, "biz") != 1 {
		t.Fatalf("retry: %v %+v, runs %d, %d rows; want the replay of the one commit", err, res, runs.Load(), countRows(t, d, "biz"))
	}
}

// downAfter is a driver whose Begin fails as an unreachable database once
// down is set.
type downAfter struct {
	driver.Driver
	down atomic.Bool
}

func (d *downAfter) Begin(ctx context.Context, opts driver.BeginOptions) (driver.TxCloser, error) {
	if d.down.Load() {
		return nil, fmt.Errorf("begin: %w", driver.ErrUnavailable)
	}
	return d.Driver.Begin(ctx, opts)
}

func (d *downAfter) Unwrap() driver.Driver { return d.Driver }

// A batch whose COMMIT's answer is lost splits so that its halves' claims
// find what it stored; when the database is then out of reach, its
// requests get ErrCommitUnknown, not "unavailable" (nothing stored): their
// batch did commit. Once the database is back, each replays.
func TestBatcherCommitUnknownThenDown(t *testing.T) {
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		dd := &downAfter{Driver: d}
		r := newRig(t, dd, idem.Config{}, idem.BatchConfig{Concurrency: 1})
		var commits int
		idem.SetCommitHook(r.b, func(ctx context.Context, commit func(context.Context) error) error {
			if err := commit(ctx); err != nil {
				return err
			}
			if commits++; commits == 2 {
				dd.down.Store(true)
				return fmt.Errorf("%w: connection lost while awaiting COMMIT's answer", driver.ErrCommitUnknown)
			}
			return nil
		})
		release := r.hold("hold")
		wait := r.do(thing{key: "a", body: `{"a":1}`}, thing{key: "b", body: `{"b":1}`}, thing{key: "c", body: `{"c":1}`})
		release()
		_, errs := wait()
		for i, key := range []string{"a", "b", "c"} {
			if !errors.Is(errs[i], idem.ErrCommitUnknown) || idem.IsRetryable(errs[i]) {
				t.Fatalf("%s: %v; want ErrCommitUnknown", key, errs[i])
			}
		}
		dd.down.Store(false)
		for _, key := range []string{"a", "b", "c"} {
			res, err := r.b.Do(context.Background(), req(key, `{"k":"`+key+`"}`), thing{key: key, body: `{"` + key + `":1}`})
			if err != nil || !res.Replayed || string(res.Body) != `{"`+key+`":1}` || r.runsOf(key) != 1 {
				t.Fatalf("%s retried: %v %+v, runs %d", key, err, res, r.runsOf(key))
			}
		}
		if got := r.bizRows(); !slices.Equal(got, []string{"a", "b", "c", "hold"}) {
			t.Fatalf("biz rows %q", got)
		}
	})
}
