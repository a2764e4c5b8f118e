package natspub_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/cmd/idem/internal/embeddednats"
	"github.com/idemhq/idem/outbox/natspub"
	"github.com/idemhq/idem/outbox/outboxtest"
)

func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness {
		srv, err := embeddednats.Start(embeddednats.Config{DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		nc, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		p, err := natspub.New(context.Background(), nc, natspub.Config{CloseConn: true})
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		return outboxtest.Harness{Publisher: p, Dedupes: true, Received: func(t *testing.T) []outboxtest.Received {
			ctx := context.Background()
			st, err := js.Stream(ctx, "IDEM")
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var out []outboxtest.Received
			for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
				m, err := st.GetMsg(ctx, seq)
				if err != nil {
					t.Fatal(err)
				}
				if m.Subject != "idem.acme."+m.Header.Get(natspub.HeaderType) {
					t.Fatalf("subject %s", m.Subject)
				}
				out = append(out, outboxtest.Received{ID: m.Header.Get("Nats-Msg-Id"), Type: m.Header.Get(natspub.HeaderType),
					Key: m.Header.Get(natspub.HeaderKey), Payload: m.Data})
			}
			return out
		}}
	})
}
