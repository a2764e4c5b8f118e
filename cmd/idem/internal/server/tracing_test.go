package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/cmd/idem/internal/embeddednats"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/tracing"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/natspub"
)

// The tests of this package share one global TracerProvider: the API hands
// its tracers to the first provider set, once. Spans are exported as they
// end (a syncer: no goroutine to leak), and each test reads only its own
// trace.
var (
	spansOnce sync.Once
	spans     *tracetest.InMemoryExporter
)

func traceSpans(t testing.TB) *tracetest.InMemoryExporter {
	t.Helper()
	spansOnce.Do(func() {
		spans = tracetest.NewInMemoryExporter()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	})
	return spans
}

// One trace runs from the client's POST /v1/transfers, through the keeper,
// the ledger write and the outbox row, across the relay's publish to NATS,
// to the consumer's inbox.Process: the message carries the publish span's
// traceparent, and every span has the parent the hop gives it. With group
// commit, the batch's transaction is a trace of its own, linked to each
// request's idem.Do span, and the request's event continues the request's
// trace from idem.Do.
func TestTraceAcrossOutbox(t *testing.T) {
	for _, groupCommit := range []bool{false, true} {
		t.Run(map[bool]string{false: "one at a time", true: "group commit"}[groupCommit], func(t *testing.T) {
			traceAcrossOutbox(t, groupCommit)
		})
	}
}

func traceAcrossOutbox(t *testing.T, groupCommit bool) {
	exp := traceSpans(t)
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ts := inputServerWith(t, d, groupCommit)

		// The client's own span: the request continues its trace.
		client := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, byte(len(d.Dialect())), map[bool]byte{false: 1, true: 2}[groupCommit]},
			SpanID:     trace.SpanID{0x0f, 0x06},
			TraceFlags: trace.FlagsSampled})
		req, err := http.NewRequest("POST", ts.URL+"/v1/transfers",
			strings.NewReader(`{"debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "traced-1")
		req.Header.Set("traceparent", "00-"+client.TraceID().String()+"-"+client.SpanID().String()+"-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /v1/transfers: %d", resp.StatusCode)
		}

		// The row stores the enqueue span's context.
		var stored string
		if err := d.Reader().QueryRow(ctx, `SELECT traceparent FROM idem_outbox WHERE type = 'transfer.created'`).Scan(&stored); err != nil {
			t.Fatal(err)
		}

		srv, err := embeddednats.Start(embeddednats.Config{DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		nc, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		pub, err := natspub.New(ctx, nc, natspub.Config{})
		if err != nil {
			t.Fatal(err)
		}
		relay, err := outbox.NewRelay(d, outbox.RelayConfig{Publisher: pub, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = relay.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })

		js, _ := jetstream.New(nc)
		cons, err := js.CreateOrUpdateConsumer(ctx, "IDEM", jetstream.ConsumerConfig{
			FilterSubject: "idem.default.transfer.created", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var jm jetstream.Msg
		for m := range batch.Messages() {
			jm = m
		}
		if jm == nil {
			t.Fatal("no transfer.created message within 30s")
		}
		header := jm.Headers().Get(outbox.HeaderTraceParent)
		if !strings.HasPrefix(header, "00-"+client.TraceID().String()+"-") {
			t.Fatalf("message traceparent %q, want the client's trace %s", header, client.TraceID())
		}

		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		cctx := inbox.ContinueTrace(ctx, jm.Headers().Get)
		in, err := inbox.New(d, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.Process(cctx, tx, inbox.Delivery{Consumer: "projector", MessageID: jm.Headers().Get("Nats-Msg-Id")},
			func(context.Context, driver.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		_ = jm.Ack()

		// The relay ends its publish span once the broker has acknowledged
		// the message, which the consumer may have fetched before that:
		// wait for the span to be exported.
		published := func() bool {
			for _, s := range exp.GetSpans() {
				if s.SpanContext.TraceID() == client.TraceID() && s.Name == "publish idem.default.transfer.created" {
					return true
				}
			}
			return false
		}
		for wait := time.Now().Add(10 * time.Second); !published() && time.Now().Before(wait); {
			time.Sleep(5 * time.Millisecond)
		}

		// The chain, span by span, all in the client's trace.
		byName := map[string]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == client.TraceID() {
				byName[s.Name] = s
			}
		}
		span := func(name string) tracetest.SpanStub {
			t.Helper()
			s, ok := byName[name]
			if !ok {
				names := make([]string, 0, len(byName))
				for n := range byName {
					names = append(names, n)
				}
				t.Fatalf("no span %q in the trace; have %v", name, names)
			}
			return s
		}
		httpSpan := span("POST /v1/transfers")
		keeper := span("idem.Do")
		publish := span("publish idem.default.transfer.created")
		process := span("process projector")
		type link struct {
			child, parent tracetest.SpanStub
			parentID      trace.SpanID
		}
		chain := []link{
			{child: httpSpan, parentID: client.SpanID()},
			{child: keeper, parent: httpSpan},
			{child: process, parent: publish},
		}
		// The spans of the transaction: in the request's trace, or in the
		// batch's, whose idem.batch span links to the request's idem.Do.
		inTx := func(name string) tracetest.SpanStub { return span(name) }
		txParent := keeper
		var storedFrom tracetest.SpanStub
		if groupCommit {
			var batch tracetest.SpanStub
			for _, s := range exp.GetSpans() {
				for _, l := range s.Links {
					if s.Name == "idem.batch" && l.SpanContext.SpanID() == keeper.SpanContext.SpanID() {
						batch = s
					}
				}
			}
			if batch.Name == "" {
				t.Fatal("no idem.batch span linked to the request's idem.Do")
			}
			inTx = func(name string) tracetest.SpanStub {
				t.Helper()
				for _, s := range exp.GetSpans() {
					if s.Name == name && s.SpanContext.TraceID() == batch.SpanContext.TraceID() {
						return s
					}
				}
				t.Fatalf("no span %q in the batch's trace", name)
				return tracetest.SpanStub{}
			}
			txParent = batch
			storedFrom = keeper
			chain = append(chain, link{child: publish, parent: keeper})
		}
		claim, apply, enqueue := inTx("idem.claim"), inTx("ledger.Apply"), inTx("outbox.Enqueue")
		chain = append(chain, link{child: claim, parent: txParent}, link{child: apply, parent: txParent},
			link{child: enqueue, parent: txParent})
		if !groupCommit {
			storedFrom = enqueue
			chain = append(chain, link{child: publish, parent: enqueue})
		}
		for _, c := range chain {
			want := c.parentID
			if !want.IsValid() {
				want = c.parent.SpanContext.SpanID()
			}
			if got := c.child.Parent.SpanID(); got != want {
				t.Errorf("%s: parent span %s, want %s (%s)", c.child.Name, got, want, c.parent.Name)
			}
		}
		if httpSpan.SpanKind != trace.SpanKindServer || publish.SpanKind != trace.SpanKindProducer || process.SpanKind != trace.SpanKindConsumer {
			t.Errorf("kinds: http %s, publish %s, process %s", httpSpan.SpanKind, publish.SpanKind, process.SpanKind)
		}
		if want := "00-" + client.TraceID().String() + "-" + storedFrom.SpanContext.SpanID().String() + "-01"; stored != want {
			t.Errorf("stored traceparent %q, want the %s span's %q", stored, storedFrom.Name, want)
		}
		if want := "00-" + client.TraceID().String() + "-" + publish.SpanContext.SpanID().String() + "-01"; header != want {
			t.Errorf("message traceparent %q, want the publish span's %q", header, want)
		}
	})
}

// TestTraceStateBounded: a client's 8 KB tracestate (32 members) is
// bounded before it is stored on the request's outbox row and before it
// reaches the broker: at most tracing.MaxStateBytes characters and
// tracing.MaxStateMembers members, the members over 128 characters
// dropped first, then members from the end; what is kept is the client's
// members as written, in order.
func TestTraceStateBounded(t *testing.T) {
	traceSpans(t)
	// 2 short members, 20 long ones, then 10 short ones: 8 KB.
	var members, short []string
	for i := range 32 {
		m := fmt.Sprintf("v%02d=%s", i, strings.Repeat("s", 60))
		if i >= 2 && i < 22 {
			// Keys and values within the recommendation's 256 characters.
			m = fmt.Sprintf("v%02d%s=%s", i, strings.Repeat("k", 120), strings.Repeat("l", 250))
		} else {
			short = append(short, m)
		}
		members = append(members, m)
	}
	huge := strings.Join(members, ",")
	if len(huge) < 8000 {
		t.Fatalf("the test's tracestate is %d bytes", len(huge))
	}
	bounded := func(t *testing.T, where, got string) {
		t.Helper()
		kept := strings.Split(got, ",")
		if got == "" || len(got) > tracing.MaxStateBytes || len(kept) > tracing.MaxStateMembers ||
			!slices.Equal(kept, short[:len(kept)]) {
			t.Fatalf("%s: tracestate of %d bytes, %d members: %.200q; want at most %d bytes of the client's short members, in order",
				where, len(got), len(kept), got, tracing.MaxStateBytes)
		}
	}
	drivertest.Each(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		ts := inputServerWith(t, d, false)
		req, err := http.NewRequest("POST", ts.URL+"/v1/transfers",
			strings.NewReader(`{"debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "traced-state")
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		req.Header.Set("tracestate", huge)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /v1/transfers: %d", resp.StatusCode)
		}
		var stored string
		if err := d.Reader().QueryRow(ctx, `SELECT tracestate FROM idem_outbox WHERE type = 'transfer.created'`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		bounded(t, "the outbox row", stored)

		srv, err := embeddednats.Start(embeddednats.Config{DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		nc, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		pub, err := natspub.New(ctx, nc, natspub.Config{})
		if err != nil {
			t.Fatal(err)
		}
		relay, err := outbox.NewRelay(d, outbox.RelayConfig{Publisher: pub, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = relay.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done })
		js, _ := jetstream.New(nc)
		cons, err := js.CreateOrUpdateConsumer(ctx, "IDEM", jetstream.ConsumerConfig{
			FilterSubject: "idem.default.transfer.created", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var jm jetstream.Msg
		for m := range batch.Messages() {
			jm = m
		}
		if jm == nil {
			t.Fatal("no transfer.created message within 30s")
		}
		bounded(t, "the broker message", jm.Headers().Get(outbox.HeaderTraceState))
		size := 0
		for k, vs := range jm.Headers() {
			for _, v := range vs {
				size += len(k) + len(v)
			}
		}
		if size > 2048 {
			t.Fatalf("the message's headers are %d bytes", size)
		}
	})
}
