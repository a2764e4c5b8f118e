package idemgrpc_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/leakcheck"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testpg.Main(leakcheck.Wrap(m))) }

// The test service is written without generated code: a hand-made service
// description whose messages are well-known types. Charge takes an amount
// (Int64Value) and answers the charge's id (StringValue); an amount of
// -1 is refused FailedPrecondition (a business refusal, stored), -2 fails
// Unavailable after its write (transient, rolled back), 0 is refused
// InvalidArgument (validation, not stored).
const (
	chargeMethod = "/idemtest.Pay/Charge"
	sqlCreate    = `CREATE TABLE charges (id text PRIMARY KEY, amount bigint NOT NULL)`
	sqlInsert    = `INSERT INTO charges (id, amount) VALUES ($1, $2)`
)

type pay struct {
	calls   atomic.Int64
	release chan struct{} // when set, Charge waits for it after its write
}

func (p *pay) charge(ctx context.Context, in *wrapperspb.Int64Value) (*wrapperspb.StringValue, error) {
	p.calls.Add(1)
	if in.Value == 0 {
		return nil, status.Error(codes.InvalidArgument, "amount: want a positive integer")
	}
	tx := idemgrpc.Tx(ctx)
	if tx == nil {
		return nil, status.Error(codes.Internal, "no transaction")
	}
	key, _ := idemgrpc.KeyFrom(ctx)
	id := fmt.Sprintf("ch_%s_%d", key.Key, p.calls.Load())
	if _, err := tx.Exec(ctx, sqlInsert, id, in.Value); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if p.release != nil {
		<-p.release
	}
	switch in.Value {
	case -1:
		return nil, status.Error(codes.FailedPrecondition, "insufficient funds")
	case -2:
		return nil, status.Error(codes.Unavailable, "the card network is down")
	}
	return wrapperspb.String(id), nil
}

var payDesc = grpc.ServiceDesc{
	ServiceName: "idemtest.Pay",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Charge",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.Int64Value)
			if err := dec(in); err != nil {
				return nil, err
			}
			p := srv.(*pay)
			h := func(ctx context.Context, req any) (any, error) { return p.charge(ctx, req.(*wrapperspb.Int64Value)) }
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, h)
		},
	}},
}

type env struct {
	d    driver.Driver
	pay  *pay
	ic   *idemgrpc.Interceptor
	conn *grpc.ClientConn
}

func newEnv(t *testing.T, d driver.Driver, cfg idemgrpc.Config) *env {
	t.Helper()
	return newEnvTB(t, d, cfg)
}

// newEnvTB creates the charges table and serves the guarded service on d
// over an in-memory listener.
func newEnvTB(t testing.TB, d driver.Driver, cfg idemgrpc.Config) *env {
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
	return serve(t, d, cfg)
}

// serve starts the guarded service on d over an in-memory listener.
func serve(t testing.TB, d driver.Driver, cfg idemgrpc.Config) *env {
	t.Helper()
	return serveWith(t, d, idem.Config{}, cfg)
}

// serveWith is serve with the keeper's Config, unless cfg has a Keeper.
func serveWith(t testing.TB, d driver.Driver, kcfg idem.Config, cfg idemgrpc.Config) *env {
	t.Helper()
	if cfg.Keeper == nil {
		k, err := idem.New(d, kcfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Keeper = k
	}
	var err error
	e := &env{d: d, pay: &pay{}}
	if e.ic, err = idemgrpc.New(cfg); err != nil {
		t.Fatal(err)
	}
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(e.ic.Unary()))
	srv.RegisterService(&payDesc, e.pay)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	e.conn, err = grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	conn := e.conn
	t.Cleanup(func() { _ = conn.Close() })
	return e
}

// answer is one call as the client saw it: the reply's wire bytes (an
// Empty keeps every field it does not know as unknown bytes), the status
// and the header metadata.
type answer struct {
	raw    []byte
	st     *status.Status
	header metadata.MD
}

func (a answer) replayed() bool { return len(a.header.Get(idemgrpc.MetadataReplayed)) == 1 }

func (e *env) call(t testing.TB, amount int64, keys ...string) answer {
	t.Helper()
	ctx := context.Background()
	for _, k := range keys {
		ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, k)
	}
	var reply emptypb.Empty
	var header metadata.MD
	err := e.conn.Invoke(ctx, chargeMethod, wrapperspb.Int64(amount), &reply, grpc.Header(&header))
	return answer{raw: reply.ProtoReflect().GetUnknown(), st: status.Convert(err), header: header}
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

func chargeID(t testing.TB, raw []byte) string {
	t.Helper()
	var v wrapperspb.StringValue
	if err := proto.Unmarshal(raw, &v); err != nil {
		t.Fatalf("reply %x: %v", raw, err)
	}
	return v.Value
}

// TestReplayIsByteIdentical: a call and its resend are one row; the resend
// gets the first reply's bytes back, marked idempotent-replayed.
func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idemgrpc.Config{})
		first := e.call(t, 100, "k1")
		if first.st.Code() != codes.OK || first.replayed() || chargeID(t, first.raw) == "" {
			t.Fatalf("first: %v replayed=%v %x", first.st, first.replayed(), first.raw)
		}
		for range 2 {
			again := e.call(t, 100, "k1")
			if again.st.Code() != codes.OK || !again.replayed() || !bytes.Equal(again.raw, first.raw) {
				t.Fatalf("resend: %v replayed=%v %x, want %x replayed", again.st, again.replayed(), again.raw, first.raw)
			}
		}
		if n := e.rows(t); n != 1 || e.pay.calls.Load() != 1 {
			t.Fatalf("%d rows, %d handler calls; want 1 and 1", n, e.pay.calls.Load())
		}
	})
}

// TestConcurrentCopies: 200 copies of one call at once are one row, one
// first reply and 199 replies byte-identical to it (or Aborted in flight,
// with RetryInfo, should a copy outwait the keeper).
func TestConcurrentCopies(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idemgrpc.Config{})
		const n = 200
		answers := make([]answer, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range answers {
			wg.Go(func() {
				<-start
				answers[i] = e.call(t, 250, "storm")
			})
		}
		close(start)
		wg.Wait()
		if rows := e.rows(t); rows != 1 {
			t.Fatalf("%d rows after %d copies, want 1", rows, n)
		}
		var firsts, replays [][]byte
		for _, a := range answers {
			switch {
			case a.st.Code() == codes.Aborted:
				wantDetail(t, a.st, idemgrpc.ReasonInFlight, true)
			case a.st.Code() != codes.OK:
				t.Fatalf("a copy answered %v", a.st)
			case a.replayed():
				replays = append(replays, a.raw)
			default:
				firsts = append(firsts, a.raw)
			}
		}
		if len(firsts) != 1 || len(replays) != n-1 {
			t.Fatalf("%d first replies, %d replays; want 1 and %d", len(firsts), len(replays), n-1)
		}
		for _, r := range replays {
			if !bytes.Equal(r, firsts[0]) {
				t.Fatalf("a replay %x differs from the first reply %x", r, firsts[0])
			}
		}
	})
}

// TestRollback: a handler that fails after its own write leaves nothing in
// the database — neither its row nor the key — and the key is free: the
// retry runs the handler again and its write commits once.
func TestRollback(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		var mu sync.Mutex
		kinds := map[idemhttp.Kind]int{}
		e := newEnv(t, d, idemgrpc.Config{OnAnswer: func(_ context.Context, _ string, k idemhttp.Kind) {
			mu.Lock()
			kinds[k]++
			mu.Unlock()
		}})
		for _, amount := range []int64{-2, 0} { // transient after a write; invalid
			a := e.call(t, amount, "k")
			if want := map[int64]codes.Code{-2: codes.Unavailable, 0: codes.InvalidArgument}[amount]; a.st.Code() != want || a.replayed() {
				t.Fatalf("amount %d: %v, want %v not replayed", amount, a.st, want)
			}
			if rows, keys := e.rows(t), e.keys(t); rows != 0 || keys != 0 {
				t.Fatalf("after a failed call: %d rows, %d keys; want none", rows, keys)
			}
		}
		if a := e.call(t, 100, "k"); a.st.Code() != codes.OK || a.replayed() {
			t.Fatalf("retry: %v replayed=%v", a.st, a.replayed())
		}
		if rows := e.rows(t); rows != 1 {
			t.Fatalf("%d rows after the retry, want 1", rows)
		}
		mu.Lock()
		defer mu.Unlock()
		if kinds[idemhttp.KindHandlerError] != 1 || kinds[idemhttp.KindInvalid] != 1 || kinds[idemhttp.KindFirst] != 1 {
			t.Fatalf("kinds %v, want one handler_error, one invalid, one first", kinds)
		}
	})
}

// TestStoredRefusal: a business refusal is the call's outcome: stored
// with its own write and replayed with the same status.
func TestStoredRefusal(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idemgrpc.Config{})
		first := e.call(t, -1, "k")
		again := e.call(t, -1, "k")
		if first.st.Code() != codes.FailedPrecondition || first.replayed() {
			t.Fatalf("first: %v", first.st)
		}
		if again.st.Code() != codes.FailedPrecondition || again.st.Message() != first.st.Message() || !again.replayed() {
			t.Fatalf("resend: %v replayed=%v, want the stored refusal replayed", again.st, again.replayed())
		}
		if rows := e.rows(t); rows != 1 || e.pay.calls.Load() != 1 {
			t.Fatalf("%d rows, %d calls; want 1 and 1", rows, e.pay.calls.Load())
		}
	})
}

// TestRefusals: the interceptor's own answers, each with its stable reason
// in an ErrorInfo, none running the handler a second time.
func TestRefusals(t *testing.T) {
	t.Parallel()
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		e := newEnv(t, d, idemgrpc.Config{})
		e.call(t, 100, "used")
		for _, tc := range []struct {
			name   string
			amount int64
			keys   []string
			code   codes.Code
			reason string
		}{
			{"missing", 100, nil, codes.InvalidArgument, idemgrpc.ReasonKeyMissing},
			{"empty", 100, []string{""}, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid},
			{"two", 100, []string{"a", "b"}, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid},
			{"too long", 100, []string{strings.Repeat("k", idem.MaxKeyLength+1)}, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid},
			{"a space", 100, []string{"a b"}, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid},
			{"reused", 200, []string{"used"}, codes.FailedPrecondition, idemgrpc.ReasonKeyReused},
		} {
			a := e.call(t, tc.amount, tc.keys...)
			if a.st.Code() != tc.code {
				t.Fatalf("%s: %v, want %v", tc.name, a.st, tc.code)
			}
			wantDetail(t, a.st, tc.reason, false)
		}
		if rows, keys := e.rows(t), e.keys(t); rows != 1 || keys != 1 || e.pay.calls.Load() != 1 {
			t.Fatalf("%d rows, %d keys, %d calls; want 1, 1 and 1", rows, keys, e.pay.calls.Load())
		}
	})
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
		e := newEnv(t, d, idemgrpc.Config{Keeper: k})
		e.call(t, 100, "k")
		now.Add(int64(2 * time.Hour))
		a := e.call(t, 100, "k")
		if a.st.Code() != codes.FailedPrecondition {
			t.Fatalf("copy past the retention: %v, want FailedPrecondition", a.st)
		}
		wantDetail(t, a.st, idemgrpc.ReasonKeyExpired, false)
		if rows := e.rows(t); rows != 1 || e.pay.calls.Load() != 1 {
			t.Fatalf("%d rows, %d calls; want 1 and 1", rows, e.pay.calls.Load())
		}
	})
}

// TestUnavailable: a database that cannot be reached is Unavailable with
// RetryInfo; nothing ran.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	// A loopback port nobody listens on: a stopped server.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	d, err := postgres.Open(context.Background(), postgres.Config{URL: "postgres://idem@" + addr + "/idem?connect_timeout=5"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	e := serve(t, d, idemgrpc.Config{})
	a := e.call(t, 100, "k")
	if a.st.Code() != codes.Unavailable {
		t.Fatalf("closed database: %v, want Unavailable", a.st)
	}
	wantDetail(t, a.st, idemgrpc.ReasonUnavailable, true)
	if e.pay.calls.Load() != 0 {
		t.Fatal("the handler ran without a database")
	}
}

// TestAllowMissingKey: in rollout mode a call without a key runs unguarded
// (no key stored, Tx nil: the test handler refuses it Internal) and is
// counted per operation; a call with a key is still guarded.
func TestAllowMissingKey(t *testing.T) {
	t.Parallel()
	d := drivertest.Open(t, "sqlite")
	var unguarded atomic.Int64
	e := newEnv(t, d, idemgrpc.Config{AllowMissingKey: true, OnAnswer: func(_ context.Context, _ string, k idemhttp.Kind) {
		if k == idemhttp.KindUnguarded {
			unguarded.Add(1)
		}
	}})
	if a := e.call(t, 100); a.st.Code() != codes.Internal || a.st.Message() != "no transaction" {
		t.Fatalf("without a key: %v, want the handler run without a transaction", a.st)
	}
	if got := e.ic.Unguarded()[chargeMethod]; got != 1 || unguarded.Load() != 1 {
		t.Fatalf("unguarded %d (OnAnswer %d), want 1", got, unguarded.Load())
	}
	if e.keys(t) != 0 {
		t.Fatal("an unguarded call stored a key")
	}
	if a := e.call(t, 100, "k"); a.st.Code() != codes.OK {
		t.Fatalf("with a key: %v", a.st)
	}
}

func wantDetail(t testing.TB, st *status.Status, reason string, retry bool) {
	t.Helper()
	var gotReason string
	var gotRetry bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.Domain != idemgrpc.Domain {
				t.Fatalf("ErrorInfo domain %q", d.Domain)
			}
			gotReason = d.Reason
		case *errdetails.RetryInfo:
			gotRetry = d.RetryDelay.AsDuration() > 0
		}
	}
	if gotReason != reason || gotRetry != retry {
		t.Fatalf("%v: reason %q retry %v, want %q and %v", st, gotReason, gotRetry, reason, retry)
	}
}

// TestConfig: a Config out of bounds is refused by New, naming the field.
func TestConfig(t *testing.T) {
	t.Parallel()
	k, err := idem.New(drivertest.Open(t, "sqlite"), idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  idemgrpc.Config
		want string
	}{
		{idemgrpc.Config{}, "Keeper is required"},
		{idemgrpc.Config{Keeper: k, MaxReplyBytes: 10}, "MaxReplyBytes"},
		{idemgrpc.Config{Keeper: k, RetryAfter: time.Nanosecond}, "RetryAfter"},
		{idemgrpc.Config{Keeper: k, Methods: make([]string, 1025)}, "Methods"},
		{idemgrpc.Config{Keeper: k, Methods: []string{}}, "Methods is empty"},
	} {
		if _, err := idemgrpc.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := idemgrpc.New(idemgrpc.Config{Keeper: k}); err != nil {
		t.Fatal(err)
	}
}
