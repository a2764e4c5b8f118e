package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/idemhq/idem/outbox/kafka"
	"github.com/idemhq/idem/outbox/outboxtest"
)

func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "idem"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		p, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs()})
		if err != nil {
			t.Fatal(err)
		}
		return outboxtest.Harness{Publisher: p, Received: func(t *testing.T) []outboxtest.Received {
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("idem"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var out []outboxtest.Received
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				fs := cl.PollFetches(ctx)
				cancel()
				n := 0
				fs.EachRecord(func(r *kgo.Record) {
					n++
					rc := outboxtest.Received{Key: string(r.Key), Payload: r.Value}
					for _, h := range r.Headers {
						switch h.Key {
						case kafka.HeaderID:
							rc.ID = string(h.Value)
						case kafka.HeaderType:
							rc.Type = string(h.Value)
						}
					}
					out = append(out, rc)
				})
				if n == 0 {
					return out
				}
			}
		}}
	})
}

// Ping finds at start what Publish would only meet as retries: a cluster
// that refuses the client's SASL credentials, named as such.
func TestPingSASL(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "alice", "pw-right"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, pass := range []string{"pw-right", "pw-wrong"} {
		p, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(),
			Opts: []kgo.Opt{kgo.SASL(scram.Auth{User: "alice", Pass: pass}.AsSha256Mechanism())}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = p.Ping(ctx)
		cancel()
		_ = p.Close()
		switch {
		case pass == "pw-right" && err != nil:
			t.Fatal(err)
		case pass == "pw-wrong" && (err == nil || !strings.Contains(err.Error(), "SASL authentication")):
			t.Fatalf("wrong password: %v", err)
		}
	}
}
