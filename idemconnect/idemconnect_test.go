package idemconnect_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/idemconnect"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakChecked{m})) }

type leakChecked struct{ m *testing.M }

func (l leakChecked) Run() int {
	code := l.m.Run()
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		return 1
	}
	return 0
}

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
	k, err := idem.New(d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Keeper = k
	e := &env{d: d, pay: &pay{}}
	if e.ic, err = idemconnect.New(cfg); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(chargeProcedure, connect.NewUnaryHandler(chargeProcedure, e.pay.charge, connect.WithInterceptors(e.ic)))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
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
	d := drivertest.Open(t, "sqlite")
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
		{"reused", nil, 200, []string{"used"}, connect.CodeFailedPrecondition, idemconnect.ReasonKeyReused},
		{"json", []connect.ClientOption{connect.WithProtoJSON()}, 100, []string{"j"}, connect.CodeInvalidArgument, idemconnect.ReasonCodecUnsupported},
	} {
		a := e.call(t, tc.opts, tc.amount, tc.keys...)
		if connect.CodeOf(a.err) != tc.code || reason(a.err) != tc.reason {
			t.Fatalf("%s: %v (reason %q), want %v %s", tc.name, a.err, reason(a.err), tc.code, tc.reason)
		}
	}
	if rows := e.rows(t); rows != 1 || e.pay.calls.Load() != 1 {
		t.Fatalf("%d rows, %d calls; want 1 and 1", rows, e.pay.calls.Load())
	}
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
