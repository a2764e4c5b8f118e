// Command rpcservice is one payment service served over gRPC and Connect,
// built on idem: Charge records a charge and announces it on NATS, and a
// retried call does neither twice, whichever protocol it came by.
//
// Both servers put the same handler behind idem's interceptors (idemgrpc,
// idemconnect). The handler runs inside the transaction that claims the
// call's idempotency key and writes its row and its outbox message through
// idemhttp.Tx: the row, the message and the stored reply commit together.
// The relay publishes the outbox to NATS JetStream, deduplicated by the
// outbox row's id.
//
// The service is written without generated code, so that it needs no
// protoc: Charge takes a google.protobuf.Int64Value (the amount) and
// answers a google.protobuf.StringValue (the charge's id, which is also
// its event's id).
//
//	DATABASE_URL=postgres://… NATS_URL=nats://… go run ./examples/rpcservice
//	go run ./examples/rpcservice relay   # a relay process on its own
//
// main_test.go runs both tests of idem (idemtest) against each protocol.
package main

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/examples/natsrelay"
	"github.com/idemhq/idem/idemconnect"
	"github.com/idemhq/idem/idemgrpc"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/outbox"
)

const (
	tenant          = "shop"
	chargeProcedure = "/shop.Payments/Charge"
	sqlCreate       = `CREATE TABLE IF NOT EXISTS charges (id text PRIMARY KEY, amount bigint NOT NULL)`
	sqlInsert       = `INSERT INTO charges (id, amount) VALUES ($1, $2)`
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dbURL, natsURL := os.Getenv("DATABASE_URL"), os.Getenv("NATS_URL")
	var err error
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		err = relay(ctx, dbURL, natsURL)
	} else {
		err = run(ctx, dbURL, natsURL, env("GRPC_ADDR", "127.0.0.1:8082"), env("CONNECT_ADDR", "127.0.0.1:8083"))
	}
	if err != nil {
		log.Fatal(err)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// run serves gRPC and Connect, with a relay in the same process, until ctx
// ends.
func run(ctx context.Context, dbURL, natsURL, grpcAddr, connectAddr string) error {
	d, err := open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer d.Close()
	s, err := newPayments(ctx, d)
	if err != nil {
		return err
	}
	gs, err := s.grpcServer()
	if err != nil {
		return err
	}
	ch, err := s.connectHandler()
	if err != nil {
		return err
	}
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return err
	}
	hs := &http.Server{Addr: connectAddr, Handler: ch, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = gs.Serve(gl) }()
	go func() {
		<-ctx.Done()
		gs.GracefulStop()
		_ = hs.Close()
	}()
	go func() { _ = natsrelay.Run(ctx, d, natsURL) }()
	if err := hs.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func open(ctx context.Context, dbURL string) (driver.Driver, error) {
	d, err := postgres.Open(ctx, postgres.Config{URL: dbURL})
	if err != nil {
		return nil, err
	}
	if err := d.Migrate(ctx); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// payments is the service.
type payments struct {
	keeper *idem.Keeper
	outbox *outbox.Outbox
	// afterWrites, when set (by tests only), runs after charge's writes; its
	// error fails the charge there, after its row and idem's outbox row.
	afterWrites func() error
}

func newPayments(ctx context.Context, d driver.Driver) (*payments, error) {
	keeper, err := idem.New(d, idem.Config{})
	if err != nil {
		return nil, err
	}
	ob, err := outbox.New(d, outbox.Config{})
	if err != nil {
		return nil, err
	}
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sqlCreate); err != nil {
		return nil, err
	}
	return &payments{keeper: keeper, outbox: ob}, tx.Commit(ctx)
}

// errInvalid is a charge refused before any work.
var errInvalid = errors.New("amount: want a positive integer")

// charge runs once per idempotency key, whichever protocol called it: its
// row and its event go through idemhttp.Tx, the transaction that also
// stores its reply.
func (s *payments) charge(ctx context.Context, amount int64) (string, error) {
	if amount <= 0 {
		return "", errInvalid
	}
	tx := idemhttp.Tx(ctx)
	id := outbox.NewID()
	if _, err := tx.Exec(ctx, sqlInsert, id, amount); err != nil {
		return "", err
	}
	payload := []byte(`{"charge":"` + id + `"}`)
	if err := s.outbox.Enqueue(ctx, tx, outbox.Message{ID: id, Tenant: tenant, Type: "charge.created", Key: id, Payload: payload}); err != nil {
		return "", err
	}
	if s.afterWrites != nil {
		if err := s.afterWrites(); err != nil {
			return "", err
		}
	}
	return id, nil
}

// grpcServer serves Charge over gRPC, guarded by idemgrpc (last in the
// chain). The service description is what protoc-gen-go-grpc would write.
func (s *payments) grpcServer() (*grpc.Server, error) {
	ic, err := idemgrpc.New(idemgrpc.Config{Keeper: s.keeper, Scope: func(context.Context, string) string { return tenant }})
	if err != nil {
		return nil, err
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()))
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "shop.Payments",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.Int64Value)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				id, err := s.charge(ctx, req.(*wrapperspb.Int64Value).Value)
				switch {
				case errors.Is(err, errInvalid):
					return nil, status.Error(codes.InvalidArgument, err.Error())
				case err != nil:
					return nil, status.Error(codes.Unavailable, "try again")
				}
				return wrapperspb.String(id), nil
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: chargeProcedure}, h)
		}}},
	}, s)
	return gs, nil
}

// connectHandler serves Charge over Connect (and gRPC-Web), guarded by
// idemconnect.
func (s *payments) connectHandler() (http.Handler, error) {
	ic, err := idemconnect.New(idemconnect.Config{Keeper: s.keeper, Scope: func(context.Context, string) string { return tenant }})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(chargeProcedure, connect.NewUnaryHandler(chargeProcedure,
		func(ctx context.Context, req *connect.Request[wrapperspb.Int64Value]) (*connect.Response[wrapperspb.StringValue], error) {
			id, err := s.charge(ctx, req.Msg.Value)
			switch {
			case errors.Is(err, errInvalid):
				return nil, connect.NewError(connect.CodeInvalidArgument, err)
			case err != nil:
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("try again"))
			}
			return connect.NewResponse(wrapperspb.String(id)), nil
		}, connect.WithInterceptors(ic)))
	return mux, nil
}

// relay runs a relay process on its own.
func relay(ctx context.Context, dbURL, natsURL string) error {
	d, err := open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer d.Close()
	return natsrelay.Run(ctx, d, natsURL)
}
