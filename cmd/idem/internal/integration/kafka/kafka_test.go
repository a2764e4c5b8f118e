package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/idemhq/idem/outbox/kafka"
	"github.com/idemhq/idem/outbox/outboxtest"
)

// partitions is the test topic's partition count.
const partitions = 3

func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "idem"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		p, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs()})
		if err != nil {
			t.Fatal(err)
		}
		return outboxtest.Harness{Publisher: p, Received: func(t *testing.T) []outboxtest.Received {
			return received(t, c.ListenAddrs())
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

// received reads topic idem from the start up to each partition's end
// offset, asked for first. A reader that stopped at the first poll to come
// back empty within a fixed time returned nothing on a loaded machine,
// where the client's first fetch can take longer than that.
func received(t *testing.T, brokers []string) []outboxtest.Received {
	t.Helper()
	// A bound for a hang, not a speed check.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("idem"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	end := endOffsets(ctx, t, cl)
	next := make(map[int32]int64, partitions)
	caughtUp := func() bool {
		for p, e := range end {
			if next[p] < e {
				return false
			}
		}
		return true
	}
	var out []outboxtest.Received
	for !caughtUp() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topic idem read up to %v, its end is %v: %v", next, end, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
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
	}
	return out
}

// endOffsets asks the broker for the offset past each partition's last
// record.
func endOffsets(ctx context.Context, t *testing.T, cl *kgo.Client) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	topic := kmsg.NewListOffsetsRequestTopic()
	topic.Topic = "idem"
	for p := range int32(partitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // the latest offset
		topic.Partitions = append(topic.Partitions, rp)
	}
	req.Topics = append(req.Topics, topic)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	end := make(map[int32]int64, partitions)
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("list offsets of %s/%d: %v", rt.Topic, rp.Partition, err)
			}
			end[rp.Partition] = rp.Offset
		}
	}
	if len(end) != partitions {
		t.Fatalf("list offsets answered for %d partitions, want %d", len(end), partitions)
	}
	return end
}
