package idemtest

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/driver/postgres"
	"github.com/idemhq/idem/pgtest"
)

// Main runs a package's tests and then stops the PostgreSQL that Postgres
// started, if any. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(idemtest.Main(m)) }
//
// A test binary that also serves as a relay child (RelayMain) calls
// RelayMain first.
func Main(m interface{ Run() int }) int { return pgtest.Main(m) }

// Postgres returns the URL of a fresh PostgreSQL schema of t's own, with
// idem's migrations applied, dropped when t ends. Connections made with the
// URL use the schema (search_path travels in it), so child processes can be
// handed the URL too. The server is the one IDEM_TEST_DATABASE_URL names, or
// a throwaway cluster started on first use in a temporary directory (this
// works from the read-only module cache) and stopped by Main. There is no
// skip: without PostgreSQL installed or IDEM_TEST_DATABASE_URL set, t fails
// saying so; nothing is installed for you.
func Postgres(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatalf("idemtest: PostgreSQL URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", pgtest.Schema(t))
	u.RawQuery = q.Encode()
	dbURL := u.String()
	ctx := context.Background()
	d, err := postgres.Open(ctx, postgres.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatalf("idemtest: open PostgreSQL: %v", err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("idemtest: migrate: %v", err)
	}
	return dbURL
}

// Msg is one message a JetStream stream of the NATS server holds.
type Msg struct {
	Stream  string
	Seq     uint64
	Subject string
	// ID is the Nats-Msg-Id header: the outbox message id when idem's relay
	// published it.
	ID     string
	Header nats.Header
	Data   []byte
}

// NATS starts an embedded NATS server with JetStream on a loopback port,
// stopped when t ends, and returns its nats:// URL and a func that reads
// back every message its streams hold, in stream then sequence order.
// Streams keep what JetStream stored, so a republish that the duplicate
// window dropped is not there, and one that it could not drop (a different
// or missing Nats-Msg-Id) is: which is what "reached the broker once" means.
func NATS(t testing.TB) (natsURL string, messages func() []Msg) {
	t.Helper()
	// The server the idem binary embeds (its internal/embeddednats), less
	// what a test does not need: the data directory is the test's own, so
	// it takes no lock.
	s, err := natsserver.NewServer(&natsserver.Options{ServerName: "idemtest", JetStream: true,
		StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatalf("idemtest: start NATS: %v", err)
	}
	go s.Start()
	shutdown := func() {
		s.Shutdown()
		s.WaitForShutdown()
	}
	if !s.ReadyForConnections(10 * time.Second) {
		shutdown()
		t.Fatalf("idemtest: start NATS: not ready in 10s")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.Name("idemtest"))
	if err != nil {
		shutdown()
		t.Fatalf("idemtest: connect to NATS: %v", err)
	}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			nc.Close()
			shutdown()
		})
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("idemtest: JetStream: %v", err)
	}
	return s.ClientURL(), func() []Msg {
		t.Helper()
		ms, err := streamMessages(js)
		if err != nil {
			t.Errorf("idemtest: read NATS streams: %v", err)
		}
		return ms
	}
}

func streamMessages(js jetstream.JetStream) ([]Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var names []string
	l := js.StreamNames(ctx)
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []Msg
	for _, name := range names {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				if errorsIsNotFound(err) {
					continue // deleted or purged
				}
				return nil, err
			}
			out = append(out, Msg{Stream: name, Seq: seq, Subject: m.Subject,
				ID: m.Header.Get(nats.MsgIdHdr), Header: m.Header, Data: m.Data})
		}
	}
	return out, nil
}

func errorsIsNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound)
}
