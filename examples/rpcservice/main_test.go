package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

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
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemtest"
)

func TestMain(m *testing.M) {
	// The crash test re-runs this binary as a relay process.
	idemtest.RelayMain("rpc-relay", func(ctx context.Context) error {
		return relay(ctx, os.Getenv("DATABASE_URL"), os.Getenv("NATS_URL"))
	})
	os.Exit(idemtest.Main(m))
}

type testService struct {
	d     driver.Driver
	dbURL string
	pay   *payments
}

func newTestService(t *testing.T) *testService {
	t.Helper()
	dbURL := idemtest.Postgres(t)
	d, err := open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	p, err := newPayments(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return &testService{d: d, dbURL: dbURL, pay: p}
}

// charges counts the side effect: rows in charges.
func (s *testService) charges(t *testing.T) func() int {
	return func() int {
		var n int
		if err := s.d.Reader().QueryRow(context.Background(), `SELECT count(*) FROM charges`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// connectCharge is a Connect-protocol unary call as idemtest sends it: an
// HTTP request with the amount marshalled as the body.
func connectCharge(key string, amount int64) *http.Request {
	body, _ := proto.Marshal(wrapperspb.Int64(amount))
	r, _ := http.NewRequest("POST", chargeProcedure, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/proto")
	r.Header.Set(idemhttp.HeaderKey, key)
	return r
}

// grpcDoer makes idemtest's DoTwice and DoConcurrently call the gRPC
// server: each Do is one call with req.Key.Key as its idempotency-key
// metadata, and its result the reply's wire bytes and status code, marked
// Replayed when the server said so (work is the server's, not the test's).
type grpcDoer struct {
	conn   *grpc.ClientConn
	amount int64
}

func (g grpcDoer) Do(ctx context.Context, req idem.Request, _ idem.Work) (idem.Result, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, req.Key.Key)
	var reply emptypb.Empty // keeps the reply's bytes as its unknown fields
	var header metadata.MD
	err := g.conn.Invoke(ctx, chargeProcedure, wrapperspb.Int64(g.amount), &reply, grpc.Header(&header))
	st := status.Convert(err)
	if st.Code() != 0 {
		return idem.Result{}, err
	}
	return idem.Result{
		Outcome:  idem.Outcome{Status: int(st.Code()), Body: reply.ProtoReflect().GetUnknown()},
		Replayed: len(header.Get(idemgrpc.MetadataReplayed)) > 0,
	}, nil
}

func (s *testService) grpcConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	gs, err := s.pay.grpcServer()
	if err != nil {
		t.Fatal(err)
	}
	ln := bufconn.Listen(1 << 20)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// The first test of idem over Connect: the same call twice, and eight
// copies at once, charge once and answer once.
func TestChargeIsOnceOverConnect(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	h, err := s.pay.connectHandler()
	if err != nil {
		t.Fatal(err)
	}
	idemtest.SendTwice(t, h, connectCharge("c-1", 1500), s.charges(t))
	idemtest.SendConcurrently(t, h, connectCharge("c-2", 700), 8, s.charges(t))
}

// The first test over gRPC, through the same helpers at the keeper's
// level.
func TestChargeIsOnceOverGRPC(t *testing.T) {
	t.Parallel()
	s := newTestService(t)
	doer := grpcDoer{conn: s.grpcConn(t), amount: 1500}
	req := idem.Request{Key: idem.Key{Key: "g-1"}}
	idemtest.DoTwice(t, doer, req, nil, s.charges(t))
	idemtest.DoConcurrently(t, doer, idem.Request{Key: idem.Key{Key: "g-2"}}, 8, nil, s.charges(t))
}

// The second test: charges made over each protocol are announced exactly
// once although the relay is killed between commit and publish (and
// between publish and mark-sent).
func TestChargeIsAnnouncedOnceAcrossRelayCrash(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"grpc", "connect"} {
		for _, fp := range []string{idemtest.BeforePublish, idemtest.AfterPublish} {
			t.Run(protocol+"/"+fp, func(t *testing.T) {
				t.Parallel()
				s := newTestService(t)
				natsURL, messages := idemtest.NATS(t)
				var ids []string
				for i := range 3 {
					var first []byte
					key := fmt.Sprint(protocol, "-", i)
					if protocol == "grpc" {
						r, _ := idemtest.DoTwice(t, grpcDoer{conn: s.grpcConn(t), amount: int64(100 + i)}, idem.Request{Key: idem.Key{Key: key}}, nil, s.charges(t))
						first = r.Body
					} else {
						h, err := s.pay.connectHandler()
						if err != nil {
							t.Fatal(err)
						}
						r, _ := idemtest.SendTwice(t, h, connectCharge(key, int64(100+i)), s.charges(t))
						first = r.Body
					}
					var id wrapperspb.StringValue
					if err := proto.Unmarshal(first, &id); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id.Value)
				}
				idemtest.KillRelay(t, idemtest.RelayCrash{
					Command:   idemtest.RelayCommand("rpc-relay", "DATABASE_URL="+s.dbURL, "NATS_URL="+natsURL),
					Failpoint: fp,
					DB:        s.dbURL,
					Messages:  messages,
					Want:      ids,
				})
			})
		}
	}
}

// A charge that fails after its own row and idem's outbox row, over either
// protocol, leaves none of them nor the key: the retry charges once.
func TestFailedChargeRollsBack(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"grpc", "connect"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			s := newTestService(t)
			fail := true
			s.pay.afterWrites = func() error {
				if fail {
					return errors.New("the card network went away")
				}
				return nil
			}
			conn := s.grpcConn(t)
			h, err := s.pay.connectHandler()
			if err != nil {
				t.Fatal(err)
			}
			charge := func() int {
				if protocol == "grpc" {
					_, err := grpcDoer{conn: conn, amount: 500}.Do(context.Background(), idem.Request{Key: idem.Key{Key: "k"}}, nil)
					return int(status.Code(err))
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, connectCharge("k", 500))
				return w.Code
			}
			if got := charge(); got != int(codes.Unavailable) && got != http.StatusServiceUnavailable {
				t.Fatalf("failed charge answered %d, want Unavailable", got)
			}
			for table, want := range map[string]int{"charges": 0, "idem_outbox": 0, "idem_keys": 0} {
				if n := s.count(t, table); n != want {
					t.Fatalf("after the failed charge, %s has %d rows, want %d", table, n, want)
				}
			}
			fail = false
			if got := charge(); got != int(codes.OK) && got != http.StatusOK {
				t.Fatalf("retry answered %d", got)
			}
			for table, want := range map[string]int{"charges": 1, "idem_outbox": 1, "idem_keys": 1} {
				if n := s.count(t, table); n != want {
					t.Fatalf("after the retry, %s has %d rows, want %d", table, n, want)
				}
			}
		})
	}
}

func (s *testService) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := s.d.Reader().QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
