package idemgrpc_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/internal/drivertest"
)

// The benchmarks drive a real gRPC server on loopback TCP from parallel
// clients (GOMAXPROCS goroutines over one connection), so ns/op is the
// inverse of throughput; the work is idemhttp's benchmarks' (one row), so
// the figures stand beside BenchmarkFirst and BenchmarkReplay/*/nocache of
// idemhttp (the interceptor has no replay cache).

func BenchmarkFirst(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			e := newBenchEnv(b, dialect)
			runCalls(b, e, func(i int64) string { return "k" + strconv.FormatInt(i, 10) })
			if n := e.rows(b); int64(n) < int64(b.N) {
				b.Fatalf("%d rows for %d first arrivals", n, b.N)
			}
		})
	}
}

func BenchmarkReplay(b *testing.B) {
	for _, dialect := range drivertest.Dialects {
		b.Run(dialect, func(b *testing.B) {
			e := newBenchEnv(b, dialect)
			if a := e.call(b, 100, "k"); a.st.Code() != codes.OK {
				b.Fatalf("first: %v", a.st)
			}
			runCalls(b, e, func(int64) string { return "k" })
			if n := e.rows(b); n != 1 {
				b.Fatalf("%d rows, want 1", n)
			}
		})
	}
}

// newBenchEnv is newEnv's service on a TCP listener.
func newBenchEnv(b *testing.B, dialect string) *env {
	b.Helper()
	d := drivertest.Open(b, dialect)
	e := newEnvTB(b, d, idemgrpc.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(e.ic.Unary()))
	srv.RegisterService(&payDesc, e.pay)
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	if e.conn, err = grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.conn.Close() })
	return e
}

func runCalls(b *testing.B, e *env, keyOf func(int64) string) {
	b.Helper()
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.MetadataKey, keyOf(seq.Add(1)))
			var reply emptypb.Empty
			if err := e.conn.Invoke(ctx, chargeMethod, wrapperspb.Int64(100), &reply); err != nil {
				b.Errorf("call: %v", status.Convert(err))
				return
			}
		}
	})
}
