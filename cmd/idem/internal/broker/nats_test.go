package broker

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// The credential and TLS options of a NATS URL: one credential at most,
// from the userinfo or a file; TLS from the scheme, tls=true or a file.
func TestParseNATSAuthTLS(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		auth NATSAuth
		tls  TLS
		err  string
	}{
		{in: "nats://alice:secret@h:1", auth: NATSAuth{User: "alice", Password: "secret"}},
		{in: "nats://alice:secret@h:1,alice:secret@h2:2", auth: NATSAuth{User: "alice", Password: "secret"}},
		{in: "nats://alice@h:1?password_file=/p", auth: NATSAuth{User: "alice", PasswordFile: "/p"}},
		{in: "nats://secret@h:1", auth: NATSAuth{Token: "secret"}},
		{in: "nats://h:1?token_file=/t", auth: NATSAuth{TokenFile: "/t"}},
		{in: "nats://h:1?creds=/c", auth: NATSAuth{CredsFile: "/c"}},
		{in: "nats://h:1?nkey=/n", auth: NATSAuth{NkeyFile: "/n"}},
		{in: "tls://h:1", tls: TLS{Enabled: true}},
		{in: "nats://h:1?tls=true", tls: TLS{Enabled: true}},
		{in: "nats://h:1?tls=false", tls: TLS{}},
		{in: "nats://h:1?tls_ca=/ca", tls: TLS{Enabled: true, CAFile: "/ca"}},
		{in: "tls://h:1?tls_cert=/c&tls_key=/k", tls: TLS{Enabled: true, CertFile: "/c", KeyFile: "/k"}},
		{in: "nats://secret@h:1?creds=/c", err: "one credential, have token@ and creds"},
		{in: "nats://alice:secret@h:1?password_file=/p", err: "user:password@ and password_file"},
		{in: "nats://h:1?nkey=/n&creds=/c", err: "one credential"},
		{in: "nats://h:1?password_file=/p", err: "needs the user name"},
		{in: "nats://h:1?creds=", err: "creds: want a file path"},
		{in: "nats://h:1?tls_cert=/c", err: "tls_cert and tls_key go together"},
		{in: "nats://h:1?tls_ca=", err: "tls_ca: want a file path"},
		{in: "nats://h:1?tls=maybe", err: `tls "maybe"`},
		{in: "tls://h:1?tls=false", err: "contradicts"},
		{in: "nats://h:1?tls=false&tls_ca=/ca", err: "contradicts"},
		{in: "nats://secret:@h:1,secret@h2:1", err: "different credentials"},
		{in: "nats://:secret@h:1", err: "credentials before @ are empty"},
		{in: "nats://h:1?password=secret", err: `unknown NATS option "password"`},
	} {
		n, err := ParseNATS(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want %q", c.in, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error shows the secret: %v", c.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(n.Auth, c.auth) || n.TLS != c.tls {
			t.Errorf("%s: %+v %+v", c.in, n.Auth, n.TLS)
		}
		if s := strings.Join(n.Servers, ","); strings.Contains(s, "@") {
			t.Errorf("%s: servers keep credentials: %s", c.in, s)
		}
	}
}

// startNATS starts a JetStream server on a loopback port, configured by
// configure, and returns its host:port.
func startNATS(t *testing.T, configure func(*server.Options)) string {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoSigs: true, NoLog: true, ServerName: "test"}
	configure(opts)
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return s.Addr().String()
}

// natsIDs returns the Nats-Msg-Id of every message in stream, read over
// a connection of its own made with opts.
func natsIDs(t *testing.T, hostPort, stream string, opts ...nats.Option) []string {
	t.Helper()
	nc, err := nats.Connect("nats://"+hostPort, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.Header.Get(jetstream.MsgIDHeader))
	}
	return ids
}

// openFails opens publishURL, which must fail with an error naming the
// server and the cause and showing none of the secrets.
func openFails(t *testing.T, publishURL string, want []string, secrets ...string) {
	t.Helper()
	p, err := Open(context.Background(), publishURL, Config{})
	if err == nil {
		_ = p.Close()
		t.Fatalf("%s: opened", Redact(publishURL))
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v, want %q in it", Redact(publishURL), err, w)
		}
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error shows a secret: %v", err)
		}
	}
}

// Each way a NATS server authenticates clients: a URL with the right
// credential publishes into the stream; a wrong one fails Open with the
// server's refusal, naming the server and showing no secret.
func TestOpenNATSAuth(t *testing.T) {
	t.Parallel()
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	userPub, _ := user.PublicKey()
	userSeed, _ := user.Seed()
	stranger, _ := nkeys.CreateUser()
	strangerSeed, _ := stranger.Seed()
	creds, trust := operatorCreds(t)
	_, untrusted := operatorCreds(t)
	for _, c := range []struct {
		name      string
		configure func(*server.Options)
		good      func(host string) string // the URL that gets in
		read      []nats.Option            // how the test reads the stream back
		bad       func(host string) string // one that does not
		secrets   []string
	}{
		{
			name: "UserPassword",
			configure: func(o *server.Options) {
				o.Users = []*server.User{{Username: "alice", Password: "pw-right-1"}}
			},
			good:    func(h string) string { return "nats://alice:pw-right-1@" + h },
			read:    []nats.Option{nats.UserInfo("alice", "pw-right-1")},
			bad:     func(h string) string { return "nats://alice:pw-wrong-1@" + h },
			secrets: []string{"pw-wrong-1"},
		},
		{
			name: "PasswordFile",
			configure: func(o *server.Options) {
				o.Users = []*server.User{{Username: "alice", Password: "pw-right-2"}}
			},
			good: func(h string) string {
				return "nats://alice@" + h + "?password_file=" + writeFile(t, "pw", "pw-right-2\n")
			},
			read: []nats.Option{nats.UserInfo("alice", "pw-right-2")},
			bad: func(h string) string {
				return "nats://alice@" + h + "?password_file=" + writeFile(t, "pw", "pw-wrong-2\n")
			},
			secrets: []string{"pw-wrong-2"},
		},
		{
			name:      "Token",
			configure: func(o *server.Options) { o.Authorization = "tok-right-3" },
			good:      func(h string) string { return "nats://tok-right-3@" + h },
			read:      []nats.Option{nats.Token("tok-right-3")},
			bad:       func(h string) string { return "nats://tok-wrong-3@" + h },
			secrets:   []string{"tok-wrong-3"},
		},
		{
			name:      "TokenFile",
			configure: func(o *server.Options) { o.Authorization = "tok-right-4" },
			good:      func(h string) string { return "nats://" + h + "?token_file=" + writeFile(t, "tok", "tok-right-4") },
			read:      []nats.Option{nats.Token("tok-right-4")},
			bad:       func(h string) string { return "nats://" + h + "?token_file=" + writeFile(t, "tok", "tok-wrong-4") },
			secrets:   []string{"tok-wrong-4"},
		},
		{
			name:      "Nkey",
			configure: func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: userPub}} },
			good:      func(h string) string { return "nats://" + h + "?nkey=" + writeFile(t, "user.nk", string(userSeed)) },
			read:      []nats.Option{nkeyOption(t, userSeed)},
			bad: func(h string) string {
				return "nats://" + h + "?nkey=" + writeFile(t, "other.nk", string(strangerSeed))
			},
			secrets: []string{string(strangerSeed)},
		},
		{
			name:      "Creds",
			configure: trust,
			good:      func(h string) string { return "nats://" + h + "?creds=" + writeFile(t, "user.creds", string(creds)) },
			read:      []nats.Option{nats.UserCredentials(writeFile(t, "user.creds", string(creds)))},
			// A user of another operator's account: the server does not
			// trust its JWT.
			bad: func(h string) string {
				other, _ := operatorCreds(t)
				return "nats://" + h + "?creds=" + writeFile(t, "other.creds", string(other))
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			host := startNATS(t, c.configure)
			good := c.good(host)
			p, err := Open(context.Background(), good+sep(good)+"stream=AUTH", Config{})
			if err != nil {
				t.Fatal(err)
			}
			publishOne(t, p, "m-"+c.name)
			if ids := natsIDs(t, host, "AUTH", c.read...); !reflect.DeepEqual(ids, []string{"m-" + c.name}) {
				t.Fatalf("stream holds %v", ids)
			}
			openFails(t, c.bad(host), []string{"NATS " + host, "Authorization Violation"}, c.secrets...)
			// No credential at all is refused the same way.
			openFails(t, "nats://"+host, []string{"NATS " + host, "Authorization Violation"})
		})
	}
	// A server of an operator that did not sign the account refuses it
	// too (the creds file is fine, the trust is not).
	t.Run("UntrustedOperator", func(t *testing.T) {
		t.Parallel()
		host := startNATS(t, untrusted)
		openFails(t, "nats://"+host+"?creds="+writeFile(t, "user.creds", string(creds)), []string{"NATS " + host, "Authorization Violation"})
	})
	// A missing or malformed file is named before any connection.
	t.Run("Files", func(t *testing.T) {
		t.Parallel()
		missing := t.TempDir() + "/missing"
		openFails(t, "nats://alice@127.0.0.1:1?password_file="+missing, []string{"password_file", missing})
		openFails(t, "nats://127.0.0.1:1?token_file="+writeFile(t, "empty", "\n"), []string{"token_file", "is empty"})
		openFails(t, "nats://127.0.0.1:1?creds="+missing, []string{"creds", missing})
		openFails(t, "nats://127.0.0.1:1?nkey="+missing, []string{"nkey", missing})
		openFails(t, "nats://127.0.0.1:1?nkey="+writeFile(t, "bad.nk", "not a seed"), []string{"nkey"})
	})
}

// sep is what appends one more query option to u.
func sep(u string) string {
	if strings.Contains(u, "?") {
		return "&"
	}
	return "?"
}

func nkeyOption(t *testing.T, seed []byte) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(writeFile(t, "read.nk", string(seed)))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// operatorCreds makes an operator, its system account, an account with
// JetStream that it signs and a user of that account: it returns the user's creds file and
// how to configure a server that trusts the operator and knows the
// account (a memory resolver: no account server to run).
func operatorCreds(t *testing.T) ([]byte, func(*server.Options)) {
	t.Helper()
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	// JetStream needs the operator's system account.
	sys, _ := nkeys.CreateAccount()
	sysPub, _ := sys.PublicKey()
	sysJWT, err := jwt.NewAccountClaims(sysPub).Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	opClaims := jwt.NewOperatorClaims(opPub)
	opClaims.SystemAccount = sysPub
	opJWT, err := opClaims.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	accClaims := jwt.NewAccountClaims(accPub)
	accClaims.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := accClaims.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	userSeed, _ := user.Seed()
	userJWT, err := jwt.NewUserClaims(userPub).Encode(acc)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, userSeed)
	if err != nil {
		t.Fatal(err)
	}
	return creds, func(o *server.Options) {
		claims, err := jwt.DecodeOperatorClaims(opJWT)
		if err != nil {
			t.Fatal(err)
		}
		resolver := &server.MemAccResolver{}
		for pub, j := range map[string]string{accPub: accJWT, sysPub: sysJWT} {
			if err := resolver.Store(pub, j); err != nil {
				t.Fatal(err)
			}
		}
		o.TrustedOperators = []*jwt.OperatorClaims{claims}
		o.AccountResolver = resolver
		o.SystemAccount = sysPub
	}
}

// A server that requires TLS and verifies client certificates (mTLS): the
// URL with the test CA and a client certificate it signed publishes into
// the stream; an untrusted server certificate, a missing client
// certificate, a missing file or a plaintext server fail Open with the
// cause.
func TestOpenNATSTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "idem-test")
	other := newTestCA(t, "other")
	certFile, keyFile, pair := ca.issue(t, "relay", false)
	otherCert, otherKey, _ := other.issue(t, "stranger", false)
	host := startNATS(t, func(o *server.Options) {
		o.TLSConfig = ca.serverTLS(t)
		o.TLS, o.TLSVerify = true, true
	})
	// The scheme or tls=true ask for TLS alike.
	files := "tls_ca=" + ca.CAFile + "&tls_cert=" + certFile + "&tls_key=" + keyFile + "&stream=TLS"
	for i, u := range []string{"tls://" + host + "?" + files, "nats://" + host + "?tls=true&" + files} {
		p, err := Open(context.Background(), u, Config{})
		if err != nil {
			t.Fatal(err)
		}
		publishOne(t, p, fmt.Sprintf("m-%d", i))
	}
	if ids := natsIDs(t, host, "TLS", nats.Secure(ca.clientTLS(pair))); !reflect.DeepEqual(ids, []string{"m-0", "m-1"}) {
		t.Fatalf("stream holds %v", ids)
	}
	t.Run("UntrustedServer", func(t *testing.T) {
		t.Parallel()
		// The system's roots do not know the test CA, nor does another CA.
		openFails(t, "tls://"+host+"?tls_cert="+certFile+"&tls_key="+keyFile,
			[]string{"NATS " + host, "certificate signed by unknown authority"})
		openFails(t, "tls://"+host+"?tls_ca="+other.CAFile+"&tls_cert="+certFile+"&tls_key="+keyFile,
			[]string{"NATS " + host, "certificate signed by unknown authority"})
	})
	t.Run("ClientCertificate", func(t *testing.T) {
		t.Parallel()
		// Under TLS 1.3 the client's handshake ends before the server has
		// checked its certificate: the server's alert is read as the
		// refusal, unless the client's first write meets the closed
		// connection first (seen on a loaded machine). Either names the
		// server and says the refusal came right after the handshake.
		refused := func(u string) {
			t.Helper()
			_, err := Open(context.Background(), u, Config{})
			if err == nil || !strings.Contains(err.Error(), "NATS "+host) ||
				!strings.Contains(err.Error(), "certificate required") && !strings.Contains(err.Error(), "closed by remote after TLS handshake") {
				t.Errorf("%s: %v, want the server's refusal of the client certificate", u, err)
			}
		}
		refused("tls://" + host + "?tls_ca=" + ca.CAFile)
		// Go's client offers no certificate the server's CAs did not sign.
		refused("tls://" + host + "?tls_ca=" + ca.CAFile + "&tls_cert=" + otherCert + "&tls_key=" + otherKey)
	})
	t.Run("Files", func(t *testing.T) {
		t.Parallel()
		missing := t.TempDir() + "/missing.pem"
		openFails(t, "tls://"+host+"?tls_ca="+missing, []string{"tls_ca", missing})
		openFails(t, "tls://"+host+"?tls_ca="+ca.CAFile+"&tls_cert="+missing+"&tls_key="+keyFile, []string{"tls_cert", missing})
		openFails(t, "tls://"+host+"?tls_ca="+ca.CAFile+"&tls_cert="+certFile+"&tls_key="+missing, []string{"tls_key", missing})
	})
	// tls:// refuses a server that offers no TLS rather than sending the
	// credentials in the clear.
	t.Run("PlaintextServer", func(t *testing.T) {
		t.Parallel()
		plain := startNATS(t, func(o *server.Options) {
			o.Users = []*server.User{{Username: "alice", Password: "pw-right-5"}}
		})
		openFails(t, "tls://alice:pw-right-5@"+plain, []string{"NATS " + plain, "secure connection not available"}, "pw-right-5")
	})
}
