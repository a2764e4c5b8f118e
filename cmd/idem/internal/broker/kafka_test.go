package broker

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/idemhq/idem/outbox/kafka"
)

// kafka:// URLs: a broker list, the topic, SASL with credentials from the
// userinfo or a file, TLS; what does not fit is refused.
func TestParseKafka(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want Kafka
		err  string
	}{
		{in: "kafka://b1:9092", want: Kafka{Brokers: []string{"b1:9092"}}},
		{in: "kafka://b1:9092,b2:9093?topic=ev", want: Kafka{Brokers: []string{"b1:9092", "b2:9093"}, Topic: "ev"}},
		{in: "kafka://[::1]:9092,kafka://b2", want: Kafka{Brokers: []string{"[::1]:9092", "b2"}}},
		{in: "kafka://alice:secret@b1:1?sasl=scram-sha-512",
			want: Kafka{Brokers: []string{"b1:1"}, SASL: "scram-sha-512", User: "alice", Password: "secret"}},
		{in: "kafka://alice@b1:1?sasl=plain&password_file=/p&tls=true",
			want: Kafka{Brokers: []string{"b1:1"}, SASL: "plain", User: "alice", PasswordFile: "/p", TLS: TLS{Enabled: true}}},
		{in: "kafka://b1:1?tls=true", want: Kafka{Brokers: []string{"b1:1"}, TLS: TLS{Enabled: true}}},
		{in: "kafka://b1:1?tls_ca=/ca&tls_cert=/c&tls_key=/k",
			want: Kafka{Brokers: []string{"b1:1"}, TLS: TLS{Enabled: true, CAFile: "/ca", CertFile: "/c", KeyFile: "/k"}}},
		{in: "kafka://alice:secret@b1:1", err: "need sasl=plain|scram-sha-256|scram-sha-512"},
		{in: "kafka://b1:1?sasl=plain", err: "sasl needs the user name"},
		{in: "kafka://alice@b1:1?sasl=plain", err: "sasl needs a password"},
		{in: "kafka://alice:@b1:1?sasl=plain&tls=true", want: Kafka{Brokers: []string{"b1:1"}, SASL: "plain", User: "alice", TLS: TLS{Enabled: true}}},
		// PLAIN sends the password as it is: over TLS only.
		{in: "kafka://alice:secret@b1:1?sasl=plain", err: "sasl=plain sends the password in clear"},
		{in: "kafka://alice@b1:1?sasl=plain&password_file=/p&tls=false", err: "sasl=plain sends the password in clear"},
		{in: "kafka://alice:secret@b1:1?sasl=gssapi", err: `sasl "gssapi"`},
		{in: "kafka://alice:secret@b1:1?sasl=plain&password_file=/p&tls=true", err: "give one"},
		{in: "kafka://b1:1?password_file=/p", err: "password_file needs sasl"},
		{in: "kafka://b1:1?topics=ev", err: `unknown Kafka option "topics"`},
		{in: "kafka://b1:1?tls_key=/k", err: "tls_cert and tls_key go together"},
		{in: "kafka://b1:1/path", err: `Kafka broker "b1:1/path"`},
		{in: "kafka://alice:secret@b1:1/path", err: `Kafka broker "…@b1:1/path"`},
		{in: "kafka://b1:1,,b2:2", err: `Kafka broker ""`},
		{in: "nats://b1:1", err: "starts with kafka://"},
	} {
		k, err := ParseKafka(c.in)
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
		if !reflect.DeepEqual(k, c.want) {
			t.Errorf("%s: %+v", c.in, k)
		}
	}
}

// kafkaIDs returns the idem-id of every record of topic idem, read by a
// client of its own made with opts.
func kafkaIDs(t *testing.T, addrs []string, want int, opts ...kgo.Opt) []string {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("idem"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	for len(ids) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("have %v, want %d records: %v", ids, want, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == kafka.HeaderID {
					ids = append(ids, string(h.Value))
				}
			}
		})
	}
	return ids
}

// Each SASL mechanism against a cluster that requires it: the right
// password (in the URL or a file) publishes a record; a wrong one fails
// Open, naming the brokers and SASL, showing no password.
func TestOpenKafkaSASL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		method string // kfake's name
		sasl   string // the URL's
		mech   func(user, pass string) sasl.Mechanism
	}{
		{"PLAIN", "plain", func(u, p string) sasl.Mechanism { return plain.Auth{User: u, Pass: p}.AsMechanism() }},
		{"SCRAM-SHA-256", "scram-sha-256", func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha256Mechanism() }},
		{"SCRAM-SHA-512", "scram-sha-512", func(u, p string) sasl.Mechanism { return scram.Auth{User: u, Pass: p}.AsSha512Mechanism() }},
	} {
		t.Run(c.method, func(t *testing.T) {
			t.Parallel()
			// Over TLS: sasl=plain without it is refused (TestKafkaPlainNeedsTLS).
			ca := newTestCA(t, "idem-test")
			certFile, keyFile, pair := ca.issue(t, "relay", false)
			tlsq := "&tls_ca=" + ca.CAFile + "&tls_cert=" + certFile + "&tls_key=" + keyFile
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "idem"), kfake.TLS(ca.serverTLS(t)),
				kfake.EnableSASL(), kfake.Superuser(c.method, "alice", "pw-right"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cluster.Close)
			addr := cluster.ListenAddrs()[0]
			for i, u := range []string{
				"kafka://alice:pw-right@" + addr + "?sasl=" + c.sasl + tlsq,
				"kafka://alice@" + addr + "?sasl=" + c.sasl + "&password_file=" + writeFile(t, "pw", "pw-right\n") + tlsq,
			} {
				p, err := Open(context.Background(), u, Config{})
				if err != nil {
					t.Fatal(err)
				}
				publishOne(t, p, []string{"m-url", "m-file"}[i])
			}
			ids := kafkaIDs(t, cluster.ListenAddrs(), 2, kgo.SASL(c.mech("alice", "pw-right")), kgo.DialTLSConfig(ca.clientTLS(pair)))
			if !reflect.DeepEqual(ids, []string{"m-url", "m-file"}) {
				t.Fatalf("topic holds %v", ids)
			}
			// A real broker answers SASL_AUTHENTICATION_FAILED; kfake
			// closes the connection, which package kafka names.
			want := []string{"Kafka " + addr, "SASL authentication"}
			openFails(t, "kafka://alice:pw-wrong@"+addr+"?sasl="+c.sasl+tlsq, want, "pw-wrong")
			openFails(t, "kafka://bob:pw-right@"+addr+"?sasl="+c.sasl+tlsq, want, "pw-right")
			otherMech := map[string]string{"plain": "scram-sha-256", "scram-sha-256": "scram-sha-512", "scram-sha-512": "plain"}
			openFails(t, "kafka://alice:pw-right@"+addr+"?sasl="+otherMech[c.sasl]+tlsq, []string{"Kafka " + addr}, "pw-right")
			openFails(t, "kafka://alice@"+addr+"?sasl="+c.sasl+"&password_file="+t.TempDir()+"/missing"+tlsq,
				[]string{"password_file", "missing"})
		})
	}
}

// A cluster that requires TLS and a client certificate its CA signed
// (mTLS), with SCRAM on top: the URL with the test CA and a client
// certificate publishes a record; an untrusted server certificate, a
// missing client certificate or a missing file fail Open with the cause.
func TestOpenKafkaTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "idem-test")
	other := newTestCA(t, "other")
	certFile, keyFile, pair := ca.issue(t, "relay", false)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "idem"), kfake.TLS(ca.serverTLS(t)),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "alice", "pw-right"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	addr := cluster.ListenAddrs()[0]
	auth := "kafka://alice:pw-right@" + addr + "?sasl=scram-sha-256&"
	p, err := Open(context.Background(), auth+"tls_ca="+ca.CAFile+"&tls_cert="+certFile+"&tls_key="+keyFile, Config{})
	if err != nil {
		t.Fatal(err)
	}
	publishOne(t, p, "m-tls")
	ids := kafkaIDs(t, cluster.ListenAddrs(), 1, kgo.DialTLSConfig(ca.clientTLS(pair)),
		kgo.SASL(scram.Auth{User: "alice", Pass: "pw-right"}.AsSha256Mechanism()))
	if !reflect.DeepEqual(ids, []string{"m-tls"}) {
		t.Fatalf("topic holds %v", ids)
	}
	t.Run("UntrustedServer", func(t *testing.T) {
		t.Parallel()
		openFails(t, auth+"tls=true&tls_cert="+certFile+"&tls_key="+keyFile,
			[]string{"Kafka " + addr, "certificate signed by unknown authority"}, "pw-right")
		openFails(t, auth+"tls_ca="+other.CAFile+"&tls_cert="+certFile+"&tls_key="+keyFile,
			[]string{"Kafka " + addr, "certificate signed by unknown authority"}, "pw-right")
	})
	t.Run("ClientCertificate", func(t *testing.T) {
		t.Parallel()
		openFails(t, auth+"tls_ca="+ca.CAFile, []string{"Kafka " + addr, "certificate required"}, "pw-right")
	})
	t.Run("Plaintext", func(t *testing.T) {
		t.Parallel()
		openFails(t, strings.TrimSuffix(auth, "&"), []string{"Kafka " + addr, "is TLS missing?"}, "pw-right")
	})
	t.Run("Files", func(t *testing.T) {
		t.Parallel()
		missing := t.TempDir() + "/missing.pem"
		openFails(t, auth+"tls_ca="+missing, []string{"tls_ca", missing})
		openFails(t, auth+"tls_ca="+certFile+"&tls_cert="+missing+"&tls_key="+keyFile, []string{"tls_cert", missing})
		openFails(t, auth+"tls_ca="+keyFile, []string{"tls_ca", "no PEM certificate"})
	})
}

// A cluster that does not answer fails Open instead of leaving a relay
// that only piles up a backlog.
func TestOpenKafkaUnreachable(t *testing.T) {
	t.Parallel()
	openFails(t, "kafka://127.0.0.1:1", []string{"Kafka 127.0.0.1:1", "connection refused"})
}
