package idemconnect_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemconnect"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
	"github.com/idemhq/idem/outbox"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakcheck.Wrap(m))) }

// The test procedure, without generated code: Charge takes an amount
// (Int64Value) and answers the charge's id (StringValue); -1 is refused
// FailedPrecondition (stored), -2 fails Unavailable after its write
// (rolled back), 0 is refused InvalidArgument (not stored).
const (
	chargeProcedure = "/idemtest.Pay/Charge"
	sqlCreate       = `CREATE TABLE charges (id text PRIMARY KEY, amount bigint NOT NULL)`
	sqlInsert       = `INSERT INTO charges (id, amount) VALUES ($1, $2)`
)

type pay struct{ calls atomic.Int64 }

func (p *pay) charge(ctx context.Context, req *connect.Request[wrapperspb.Int64Value]) (*connect.Response[wrapperspb.StringValue], error) {
	n := p.calls.Add(1)
	amount := req.Msg.Value
	if amount == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("amount: want a positive integer"))
	}
	tx := idemconnect.Tx(ctx)
	if tx == nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("no transaction"))
	}
	key, _ := idemconnect.KeyFrom(ctx)
	id := fmt.Sprintf("ch_%s_%d", key.Key, n)
	if _, err := tx.Exec(ctx, sqlInsert, id, amount); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	switch amount {
	case -1:
		ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("insufficient funds"))
		if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "INSUFFICIENT_FUNDS", Domain: "shop"}); err == nil {
			ce.AddDetail(d)
		}
		return nil, ce
	case -2:
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the card network is down"))
	}
	return connect.NewResponse(wrapperspb.String(id)), nil
}

type env struct {
	d   driver.Driver
	pay *pay
	ic  *idemconnect.Interceptor
	srv *httptest.Server
	// plain serves the same handler without WithVerbatimJSON.
	plain *httptest.Server
}

func newEnv(t *testing.T, d driver.Driver, cfg idemconnect.Config) *env {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sqlCreate); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if cfg.Keeper == nil {
		k, err := idem.New(d, idem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Keeper = k
	}
	e := &env{d: d, pay: &pay{}}
	if e.ic, err = idemconnect.New(cfg); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(chargeProcedure, connect.NewUnaryHandler(chargeProcedure, e.pay.charge,
		connect.WithInterceptors(e.ic), idemconnect.WithVerbatimJSON()))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	plain := http.NewServeMux()
	plain.Handle(chargeProcedure, connect.NewUnaryHandler(chargeProcedure, e.pay.charge, connect.WithInterceptors(e.ic)))
	e.plain = httptest.NewServer(plain)
	t.Cleanup(e.plain.Close)
	return e
}

// answer is one call as the client saw it: the reply's wire bytes (an
// Empty keeps the fields it does not know as unknown bytes), the error and
// the headers (or the error's metadata).
type answer struct {
	raw    []byte
	err    error
	header http.Header
}

func (a answer) replayed() bool { return a.header.Get(idemconnect.HeaderReplayed) == "true" }

// protocols are the wire protocols the tests call with (gRPC needs HTTP/2;
// gRPC-Web is its framing over HTTP/1.1).
var protocols = map[string][]connect.ClientOption{
	"connect": nil,
	"grpcweb": {connect.WithGRPCWeb()},
}

func (e *env) call(t testing.TB, opts []connect.ClientOption, amount int64, keys ...string) answer {
	t.Helper()
	c := connect.NewClient[wrapperspb.Int64Value, emptypb.Empty](e.srv.Client(), e.srv.URL+chargeProcedure, opts...)
	req := connect.NewRequest(wrapperspb.Int64(amount))
	for _, k := range keys {
		req.Header().Add(idemconnect.HeaderKey, k)
	}
	res, err := c.CallUnary(context.Background(), req)
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return answer{err: err, header: ce.Meta()}
		}
		t.Fatal(err)
	}
	return answer{raw: res.Msg.ProtoReflect().GetUnknown(), header: res.Header()}
}

func (e *env) rows(t testing.TB) int {
	t.Helper()
	var n int
	if err := e.d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM charges`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) keys(t testing.TB) int {
	t.Helper()
	var n int
	if err := e.d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM idem_keys`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReplayIsByteIdentical: a call and its resend are one row, and the
// resend gets the first reply's bytes, marked replayed; 50 copies at once
// are still one row and one reply.
func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idemconnect.Config{})
		for name, opts := range protocols {
			key := "k-" + name
			first := e.call(t, opts, 100, key)
			var id wrapperspb.StringValue
			if first.err != nil || first.replayed() || proto.Unmarshal(first.raw, &id) != nil || id.Value == "" {
				t.Fatalf("%s first: %v replayed=%v %x", name, first.err, first.replayed(), first.raw)
			}
			again := e.call(t, opts, 100, key)
			if again.err != nil || !again.replayed() || !bytes.Equal(again.raw, first.raw) {
				t.Fatalf("%s resend: %v replayed=%v %x, want %x", name, again.err, again.replayed(), again.raw, first.raw)
			}
		}
		var wg sync.WaitGroup
		answers := make([]answer, 50)
		for i := range answers {
			wg.Go(func() { answers[i] = e.call(t, nil, 7, "storm") })
		}
		wg.Wait()
		firsts := 0
		for _, a := range answers {
			if a.err == nil && !a.replayed() {
				firsts++
			}
			if a.err != nil && connect.CodeOf(a.err) != connect.CodeAborted || a.err == nil && !bytes.Equal(a.raw, answers[0].raw) && answers[0].err == nil {
				t.Fatalf("a concurrent copy: %v %x", a.err, a.raw)
			}
		}
		if n := e.rows(t); n != 3 || firsts != 1 {
			t.Fatalf("%d rows, %d first replies; want 3 and 1", n, firsts)
		}
	})
}

// TestRollback: a handler that fails after its own write leaves neither
// its row nor the key; the retry runs and commits once. A business refusal
// is stored with its write and replayed, details included.
func TestRollback(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idemconnect.Config{})
		for _, amount := range []int64{-2, 0} {
			a := e.call(t, nil, amount, "k")
			if a.err == nil || a.replayed() {
				t.Fatalf("amount %d: %v replayed=%v", amount, a.err, a.replayed())
			}
			if rows, keys := e.rows(t), e.keys(t); rows != 0 || keys != 0 {
				t.Fatalf("after a failed call: %d rows, %d keys; want none", rows, keys)
			}
		}
		if a := e.call(t, nil, 100, "k"); a.err != nil || a.replayed() {
			t.Fatalf("retry: %v", a.err)
		}
		first := e.call(t, nil, -1, "refused")
		again := e.call(t, nil, -1, "refused")
		if connect.CodeOf(first.err) != connect.CodeFailedPrecondition || first.replayed() ||
			connect.CodeOf(again.err) != connect.CodeFailedPrecondition || !again.replayed() || again.err.Error() != first.err.Error() {
			t.Fatalf("stored refusal: %v, then %v replayed=%v", first.err, again.err, again.replayed())
		}
		if reason(again.err) != "INSUFFICIENT_FUNDS" {
			t.Fatalf("the replayed refusal lost its detail: %v", again.err)
		}
		if rows := e.rows(t); rows != 2 {
			t.Fatalf("%d rows, want 2 (the retry and the stored refusal)", rows)
		}
	})
}

// TestRefusals: the interceptor's own answers and their reasons.
func TestRefusals(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) { refusals(t, d) })
}

// refusals: each refusal is an InvalidArgument or FailedPrecondition with
// its reason, before the handler runs; nothing is stored.
func refusals(t *testing.T, d driver.Driver) {
	e := newEnv(t, d, idemconnect.Config{})
	e.call(t, nil, 100, "used")
	for _, tc := range []struct {
		name   string
		opts   []connect.ClientOption
		amount int64
		keys   []string
		code   connect.Code
		reason string
	}{
		{"missing", nil, 100, nil, connect.CodeInvalidArgument, idemconnect.ReasonKeyMissing},
		{"empty", nil, 100, []string{""}, connect.CodeInvalidArgument, idemconnect.ReasonKeyInvalid},
		{"two", nil, 100, []string{"a", "b"}, connect.CodeInvalidArgument, idemconnect.ReasonKeyInvalid},
		{"too long", nil, 100, []string{strings.Repeat("k", idem.MaxKeyLength+1)}, connect.CodeInvalidArgument, idemconnect.ReasonKeyInvalid},
		{"a space", nil, 100, []string{"a b"}, connect.CodeInvalidArgument, idemconnect.ReasonKeyInvalid},
		{"reused", nil, 200, []string{"used"}, connect.CodeFailedPrecondition, idemconnect.ReasonKeyReused},
		{"json missing", jsonOpts, 100, nil, connect.CodeInvalidArgument, idemconnect.ReasonKeyMissing},
		{"json two", jsonOpts, 100, []string{"a", "b"}, connect.CodeInvalidArgument, idemconnect.ReasonKeyInvalid},
		{"json reused", jsonOpts, 200, []string{"used"}, connect.CodeFailedPrecondition, idemconnect.ReasonKeyReused},
	} {
		a := e.call(t, tc.opts, tc.amount, tc.keys...)
		if connect.CodeOf(a.err) != tc.code || reason(a.err) != tc.reason {
			t.Fatalf("%s: %v (reason %q), want %v %s", tc.name, a.err, reason(a.err), tc.code, tc.reason)
		}
	}
	if rows, keys := e.rows(t), e.keys(t); rows != 1 || keys != 1 || e.pay.calls.Load() != 1 {
		t.Fatalf("%d rows, %d keys, %d calls; want 1, 1 and 1", rows, keys, e.pay.calls.Load())
	}
}

// TestExpired: a copy past the keeper's retention, within its memory, is
// FailedPrecondition IDEMPOTENCY_KEY_EXPIRED; the handler does not run
// again.
func TestExpired(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var now atomic.Int64
		now.Store(time.Now().UnixNano())
		k, err := idem.New(d, idem.Config{Retention: time.Hour, Clock: func() time.Time { return time.Unix(0, now.Load()) }})
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, d, idemconnect.Config{Keeper: k})
		e.call(t, nil, 100, "k")
		now.Add(int64(2 * time.Hour))
		a := e.call(t, nil, 100, "k")
		if connect.CodeOf(a.err) != connect.CodeFailedPrecondition || reason(a.err) != idemconnect.ReasonKeyExpired {
			t.Fatalf("copy past the retention: %v (reason %q), want FailedPrecondition %s", a.err, reason(a.err), idemconnect.ReasonKeyExpired)
		}
		if rows := e.rows(t); rows != 1 || e.pay.calls.Load() != 1 {
			t.Fatalf("%d rows, %d calls; want 1 and 1", rows, e.pay.calls.Load())
		}
	})
}

// TestAllowMissingKey: in rollout mode a call without a key runs unguarded
// and is counted per procedure.
func TestAllowMissingKey(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	e := newEnv(t, d, idemconnect.Config{AllowMissingKey: true})
	if a := e.call(t, nil, 100); connect.CodeOf(a.err) != connect.CodeInternal || !strings.Contains(a.err.Error(), "no transaction") {
		t.Fatalf("without a key: %v, want the handler run without a transaction", a.err)
	}
	if got := e.ic.Unguarded()[chargeProcedure]; got != 1 || e.keys(t) != 0 {
		t.Fatalf("unguarded %d, keys %d; want 1 and 0", got, e.keys(t))
	}
}

func reason(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.Reason
			}
		}
	}
	return ""
}

var jsonOpts = []connect.ClientOption{connect.WithProtoJSON()}

// raw is one call as it crossed the wire: the response body's bytes
// (gRPC-Web's frames as they are), its headers and the error the client made of it.
type raw struct {
	body   []byte
	header http.Header
	err    error
	id     string
}

func (r raw) replayed() bool { return r.header.Get(idemconnect.HeaderReplayed) == "true" }

// capture keeps the last response body it carried.
type capture struct {
	base http.RoundTripper
	body *[]byte
}

func (c capture) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	*c.body = b
	res.Body = io.NopCloser(bytes.NewReader(b))
	return res, nil
}

// callRaw calls srv's Charge with the typed client over opts and keeps the
// bytes of the answer.
func callRaw(t testing.TB, srv *httptest.Server, opts []connect.ClientOption, amount int64, keys ...string) raw {
	t.Helper()
	var body []byte
	hc := &http.Client{Transport: capture{base: srv.Client().Transport, body: &body}}
	// Without gzip, so that the body is the bytes the codec wrote.
	opts = append(slices.Clip(opts), connect.WithAcceptCompression("gzip", nil, nil))
	c := connect.NewClient[wrapperspb.Int64Value, wrapperspb.StringValue](hc, srv.URL+chargeProcedure, opts...)
	req := connect.NewRequest(wrapperspb.Int64(amount))
	for _, k := range keys {
		req.Header().Add(idemconnect.HeaderKey, k)
	}
	res, err := c.CallUnary(context.Background(), req)
	if err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Fatal(err)
		}
		return raw{body: body, header: ce.Meta(), err: err}
	}
	return raw{body: body, header: res.Header(), id: res.Msg.Value}
}

// jsonProtocols are the wire protocols in JSON: Connect's unary
// application/json, and gRPC-Web's application/grpc-web+json.
var jsonProtocols = map[string][]connect.ClientOption{
	"connect+json": jsonOpts,
	"grpcweb+json": {connect.WithGRPCWeb(), connect.WithProtoJSON()},
}

// TestJSONReplayIsByteIdentical: a guarded call in JSON runs once; its
// resend gets the first body byte for byte, marked replayed, with and
// without WithVerbatimJSON; 200 copies at once are one row, one first
// reply and byte-identical replays.
func TestJSONReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idemconnect.Config{})
		rows := 0
		for name, opts := range jsonProtocols {
			for srvName, srv := range map[string]*httptest.Server{"verbatim": e.srv, "plain": e.plain} {
				key := "k-" + name + "-" + srvName
				first := callRaw(t, srv, opts, 100, key)
				if first.err != nil || first.replayed() || first.id == "" {
					t.Fatalf("%s %s first: %v replayed=%v", name, srvName, first.err, first.replayed())
				}
				again := callRaw(t, srv, opts, 100, key)
				if again.err != nil || !again.replayed() || !bytes.Equal(again.body, first.body) || again.id != first.id {
					t.Fatalf("%s %s resend: %v replayed=%v %q, want %q", name, srvName, again.err, again.replayed(), again.body, first.body)
				}
				rows++
			}
		}
		// A stored refusal is replayed in JSON too, details and bytes alike.
		refused := callRaw(t, e.srv, jsonOpts, -1, "refused")
		again := callRaw(t, e.srv, jsonOpts, -1, "refused")
		if connect.CodeOf(refused.err) != connect.CodeFailedPrecondition || refused.replayed() || !again.replayed() ||
			reason(again.err) != "INSUFFICIENT_FUNDS" || !bytes.Equal(again.body, refused.body) {
			t.Fatalf("stored refusal in JSON: %v %q, then %v replayed=%v %q", refused.err, refused.body, again.err, again.replayed(), again.body)
		}
		rows++
		if got := e.rows(t); got != rows || e.pay.calls.Load() != int64(rows) {
			t.Fatalf("%d rows, %d calls; want %d each", got, e.pay.calls.Load(), rows)
		}

		answers := make([]raw, 200)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() { answers[i] = callRaw(t, e.srv, jsonOpts, 7, "storm") })
		}
		wg.Wait()
		var firsts, replays int
		var body []byte
		for _, a := range answers {
			switch {
			case a.err != nil && connect.CodeOf(a.err) == connect.CodeAborted:
			case a.err != nil:
				t.Fatalf("a concurrent copy: %v", a.err)
			case !a.replayed():
				firsts++
			default:
				replays++
			}
			if a.err == nil && body == nil {
				body = a.body
			}
			if a.err == nil && !bytes.Equal(a.body, body) {
				t.Fatalf("a concurrent copy's body %q, another's %q", a.body, body)
			}
		}
		if got := e.rows(t); got != rows+1 || firsts != 1 || replays == 0 {
			t.Fatalf("%d rows, %d first replies, %d replays; want %d, 1 and some", got, firsts, replays, rows+1)
		}
	})
}

// TestJSONAndBinaryAreOneRequest: a request's fingerprint is its message,
// not its encoding: a copy in binary of a call in JSON (and the reverse) is
// a replay, in its own codec, of the one effect; the key with another
// amount is refused IDEMPOTENCY_KEY_REUSED in either codec, nothing
// stored.
func TestJSONAndBinaryAreOneRequest(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idemconnect.Config{})
		binary := callRaw(t, e.srv, nil, 100, "b-first")
		inJSON := callRaw(t, e.srv, jsonOpts, 100, "b-first")
		if binary.err != nil || binary.replayed() || inJSON.err != nil || !inJSON.replayed() || inJSON.id != binary.id {
			t.Fatalf("binary then JSON: %v %q, then %v replayed=%v %q", binary.err, binary.id, inJSON.err, inJSON.replayed(), inJSON.id)
		}
		if want := `"` + binary.id + `"`; string(inJSON.body) != want {
			t.Fatalf("JSON replay of a binary first arrival: %q, want %q", inJSON.body, want)
		}
		inJSON = callRaw(t, e.srv, jsonOpts, 100, "j-first")
		again := callRaw(t, e.srv, jsonOpts, 100, "j-first")
		binary = callRaw(t, e.srv, nil, 100, "j-first")
		if inJSON.err != nil || inJSON.replayed() || binary.err != nil || !binary.replayed() || binary.id != inJSON.id ||
			!bytes.Equal(again.body, inJSON.body) {
			t.Fatalf("JSON then binary: %v %q, then %v replayed=%v %q", inJSON.err, inJSON.id, binary.err, binary.replayed(), binary.id)
		}
		for _, opts := range [][]connect.ClientOption{nil, jsonOpts} {
			for _, key := range []string{"b-first", "j-first"} {
				a := callRaw(t, e.srv, opts, 200, key)
				if connect.CodeOf(a.err) != connect.CodeFailedPrecondition || reason(a.err) != idemconnect.ReasonKeyReused {
					t.Fatalf("reused %s: %v (reason %q)", key, a.err, reason(a.err))
				}
			}
		}
		if rows, keys := e.rows(t), e.keys(t); rows != 2 || keys != 2 || e.pay.calls.Load() != 2 {
			t.Fatalf("%d rows, %d keys, %d calls; want 2 each", rows, keys, e.pay.calls.Load())
		}
	})
}

// TestVerbatimJSON: with WithVerbatimJSON a replay in JSON is the stored
// JSON as it is, not the reply marshalled again, so that a later build
// whose protojson spaces its output otherwise still replays the first
// bytes. The stored JSON is rewritten here as another build would have
// written it; without the option the replay is marshalled again.
func TestVerbatimJSON(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idemconnect.Config{})
		first := callRaw(t, e.srv, jsonOpts, 100, "v")
		if first.err != nil {
			t.Fatal(first.err)
		}
		stored := ` "` + first.id + `" `
		header, err := json.Marshal(http.Header{"Idem-Reply-Type": {"google.protobuf.StringValue"}, "Idem-Reply-Json": {stored}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := tx.Exec(ctx, `UPDATE idem_keys SET header = $1`, header); err != nil || n != 1 {
			t.Fatalf("rewrite the stored JSON: %d rows, %v", n, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		verbatim := callRaw(t, e.srv, jsonOpts, 100, "v")
		plain := callRaw(t, e.plain, jsonOpts, 100, "v")
		if !verbatim.replayed() || string(verbatim.body) != stored || verbatim.id != first.id {
			t.Fatalf("verbatim replay %q, want the stored %q", verbatim.body, stored)
		}
		if !plain.replayed() || !bytes.Equal(plain.body, first.body) {
			t.Fatalf("replay without WithVerbatimJSON %q, want it marshalled again: %q", plain.body, first.body)
		}
	})
}

// TestTxFromContext: a handler that hands the transaction it reached from
// its context to idem's packages gets a clear error, never a panic, when
// that transaction cannot be used: nil in a call that ran unguarded
// (driver.ErrNoTx), or a transaction of another database than the
// package's (driver.ErrWrongDialect). The call fails Internal and nothing
// is written or stored.
func TestTxFromContext(t *testing.T) {
	t.Parallel()
	pg, lite := drivertest.Open(t, "postgres"), drivertest.Open(t, "sqlite")
	ob, err := outbox.New(pg, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := idem.New(lite, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ic, err := idemconnect.New(idemconnect.Config{Keeper: k, AllowMissingKey: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []error
	h := func(ctx context.Context, _ *connect.Request[wrapperspb.Int64Value]) (*connect.Response[wrapperspb.StringValue], error) {
		err := ob.Enqueue(ctx, idemconnect.Tx(ctx), outbox.Message{Type: "charge.created", Key: "c", Payload: []byte(`{}`)})
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		return connect.NewResponse(wrapperspb.String("ok")), nil
	}
	mux := http.NewServeMux()
	mux.Handle(chargeProcedure, connect.NewUnaryHandler(chargeProcedure, h, connect.WithInterceptors(ic)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	for _, keys := range [][]string{nil, {"k"}} {
		if a := callRaw(t, srv, nil, 1, keys...); connect.CodeOf(a.err) != connect.CodeInternal {
			t.Fatalf("keys %q: %v, want Internal", keys, a.err)
		}
	}
	if len(errs) != 2 || !errors.Is(errs[0], driver.ErrNoTx) || !errors.Is(errs[1], driver.ErrWrongDialect) {
		t.Fatalf("errors %v; want ErrNoTx (unguarded) then ErrWrongDialect (a SQLite transaction)", errs)
	}
	for _, q := range []struct {
		d     driver.Driver
		table string
	}{{pg, "idem_outbox"}, {lite, "idem_keys"}} {
		var n int
		if err := q.d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM `+q.table).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s: %d rows, %v; want none", q.table, n, err)
		}
	}
}
