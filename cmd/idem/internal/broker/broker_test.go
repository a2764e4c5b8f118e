package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/cmd/idem/internal/embeddednats"
	"github.com/idemhq/idem/outbox"
)

// nats:// URLs: a host list, each host with or without the scheme, and the
// stream options; malformed ones are refused with the part at fault named.
func TestParseNATS(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in       string
		servers  string
		replicas int
		stream   string
		dup      time.Duration
		err      string
	}{
		{in: "nats://127.0.0.1:4222", servers: "nats://127.0.0.1:4222"},
		{in: "nats://h1:4222,h2:4223,nats://h3:4224?replicas=3&stream=EV&duplicates=30m",
			servers: "nats://h1:4222,nats://h2:4223,nats://h3:4224", replicas: 3, stream: "EV", dup: 30 * time.Minute},
		{in: "nats://u:p@h1:1, h2:2", servers: "nats://h1:1,nats://h2:2"},
		{in: "tls://h1:1,tls://h2:2,nats://h3:3", servers: "nats://h1:1,nats://h2:2,nats://h3:3"},
		{in: "nats://[::1]:4222,[::1]:4223", servers: "nats://[::1]:4222,nats://[::1]:4223"},
		{in: "nats://h1:1/", servers: "nats://h1:1"},
		{in: "nats://h1:1,?replicas=3", err: `NATS server ""`},
		{in: "nats://h1:1,,h2:2", err: `NATS server ""`},
		{in: "nats://h1:1/stream", err: "want host:port"},
		{in: "nats://u:secret@h1:1/x", err: "…@h1:1/x"},
		{in: "nats://h1:1?replicas=0", err: "replicas"},
		{in: "nats://h1:1?replicas=6", err: "replicas"},
		{in: "nats://h1:1?replicas=three", err: "replicas"},
		{in: "nats://h1:1?duplicates=soon", err: "duplicates"},
		{in: "nats://h1:1?replica=3", err: `unknown NATS option "replica"`},
		{in: "nats://h1:1?stream=A&stream=B", err: `"stream" given 2 times`},
		{in: "nats://h1:1#frag", err: "want host:port"},
		{in: "nats://u:secret@h1:1,v:secret2@h2:2", err: "different credentials"},
		{in: "kafka://h1:1", err: "starts with nats:// or tls://"},
		{in: "nats://" + strings.Repeat("h:1,", 33), err: "more than 32"},
	} {
		n, err := ParseNATS(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want %q", c.in, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error shows the password: %v", c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := strings.Join(n.Servers, ","); got != c.servers || n.Config.Replicas != c.replicas ||
			n.Config.Stream != c.stream || n.Config.Duplicates != c.dup {
			t.Errorf("%s: %q %+v", c.in, got, n.Config)
		}
	}
}

// A URL listing a dead server before a live one connects to the live one,
// and the stream is created with the replicas the URL asks for; a message
// published through it lands in the stream once.
func TestOpenNATSHostList(t *testing.T) {
	t.Parallel()
	srv, err := embeddednats.Start(embeddednats.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx := context.Background()
	live := strings.TrimPrefix(srv.ClientURL(), "nats://")
	p, err := Open(ctx, "nats://127.0.0.1:1,"+live+"?replicas=1&stream=LIST", Config{})
	if err != nil {
		t.Fatal(err)
	}
	msg := outbox.Message{ID: "m1", Tenant: "acme", Type: "a.b", Key: "k", Payload: []byte(`{}`), CreatedAt: time.Now()}
	for range 2 { // the second is a republish the duplicate window drops
		if errs := p.Publish(ctx, []outbox.Message{msg}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, "LIST")
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.Config.Replicas != 1 || info.State.Msgs != 1 {
		t.Fatalf("stream: %d replicas, %d messages", info.Config.Replicas, info.State.Msgs)
	}
	// Three replicas on a single server cannot be placed: a clear error,
	// not a stream that silently keeps one copy.
	if _, err := Open(ctx, "nats://"+live+"?replicas=3&stream=THREE", Config{}); err == nil {
		t.Fatal("replicas=3 on one server: no error")
	}
}
