package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/natspub"
)

// NATS is a parsed nats:// or tls:// publish URL.
type NATS struct {
	// Servers are the URLs to connect to, each nats://host:port without
	// credentials (Auth holds them, for every server alike); the client
	// moves to another when one goes down.
	Servers []string
	// Config is the stream configuration the query sets.
	Config natspub.Config
	// Auth is how the client authenticates.
	Auth NATSAuth
	// TLS is how it encrypts.
	TLS TLS
}

// NATSAuth holds at most one way to authenticate to NATS. Passwords and
// tokens are secrets: Redact hides them from the URL, and no error shows
// them.
type NATSAuth struct {
	// User and Password come from the URL's user:password@, or User from
	// user@ with PasswordFile.
	User, Password string
	// PasswordFile (password_file) holds User's password.
	PasswordFile string
	// Token comes from the URL's token@ (userinfo without a password).
	Token string
	// TokenFile (token_file) holds the token.
	TokenFile string
	// CredsFile (creds) is a .creds file: a user JWT and its NKey seed,
	// for servers run in operator (decentralised JWT) mode.
	CredsFile string
	// NkeyFile (nkey) holds an NKey user seed (SU…).
	NkeyFile string
}

// natsOptions are the query keys of a NATS URL.
var natsOptions = append([]string{"stream", "duplicates", "replicas",
	"creds", "nkey", "password_file", "token_file", "route", "format", "ce_source"}, tlsOptions...)

// ParseNATS parses
//
//	nats://[user:pass@|token@]host:port[,host:port…][?stream=S&duplicates=D&replicas=N
//	       &creds=F|nkey=F|password_file=F|token_file=F&tls=true&tls_ca=F&tls_cert=F&tls_key=F
//	       &route=T&route.TYPE=SUBJECT&format=F&ce_source=S]
//
// A tls:// URL is a nats:// one with tls=true. Hosts after the first may
// repeat the scheme. Unknown options are refused.
func ParseNATS(publishURL string) (NATS, error) {
	var n NATS
	if !strings.HasPrefix(publishURL, "nats://") && !strings.HasPrefix(publishURL, "tls://") {
		return n, errors.New("--publish: a NATS URL starts with nats:// or tls://")
	}
	l, err := parseHostList(publishURL, "NATS server", "nats", "tls")
	if err != nil {
		return n, err
	}
	for _, h := range l.hosts {
		n.Servers = append(n.Servers, "nats://"+h)
	}
	q := l.query
	if n.Config.Routes, err = parseRoutes(q); err != nil {
		return n, err
	}
	if err := checkOptions(q, "NATS", natsOptions); err != nil {
		return n, err
	}
	if n.Config.CloudEvents, err = parseCloudEvents(q); err != nil {
		return n, err
	}
	if n.TLS, err = parseTLS(q, l.schemes["tls"]); err != nil {
		return n, err
	}
	if n.Auth, err = parseNATSAuth(l, q); err != nil {
		return n, err
	}
	n.Config.Stream = q.Get("stream")
	if s := q.Get("duplicates"); s != "" {
		if n.Config.Duplicates, err = time.ParseDuration(s); err != nil {
			return n, fmt.Errorf("--publish: duplicates: %w", err)
		}
	}
	if s := q.Get("replicas"); s != "" {
		r, err := strconv.Atoi(s)
		if err != nil || r < 1 || r > 5 {
			return n, fmt.Errorf("--publish: replicas %q: want 1..5 (at most the cluster's size)", s)
		}
		n.Config.Replicas = r
	}
	return n, nil
}

// parseNATSAuth reads the credentials from the userinfo and the query:
// one way at most, since a server checks one.
func parseNATSAuth(l hostList, q url.Values) (NATSAuth, error) {
	var a NATSAuth
	var given []string
	a.PasswordFile, a.TokenFile = q.Get("password_file"), q.Get("token_file")
	a.CredsFile, a.NkeyFile = q.Get("creds"), q.Get("nkey")
	if l.user != nil {
		pass, hasPass := l.user.Password()
		switch {
		case hasPass:
			a.User, a.Password = l.user.Username(), pass
			given = append(given, "user:password@")
		case a.PasswordFile != "":
			a.User = l.user.Username()
		default:
			a.Token = l.user.Username()
			given = append(given, "token@")
		}
	}
	for _, f := range []struct{ option, path string }{
		{"password_file", a.PasswordFile}, {"token_file", a.TokenFile}, {"creds", a.CredsFile}, {"nkey", a.NkeyFile},
	} {
		if q.Has(f.option) && f.path == "" {
			return a, fmt.Errorf("--publish: %s: want a file path", f.option)
		}
		if f.path != "" {
			given = append(given, f.option)
		}
	}
	if a.PasswordFile != "" && a.User == "" {
		return a, errors.New("--publish: password_file needs the user name before the host: nats://USER@host?password_file=…")
	}
	if len(given) > 1 {
		return a, fmt.Errorf("--publish: NATS takes one credential, have %s", strings.Join(given, " and "))
	}
	return a, nil
}

// options are the client options the URL asks for. It reads the password
// and token files, and fails on a file it cannot read, naming the option.
func (n NATS) options() ([]nats.Option, error) {
	opts := []nats.Option{nats.Name("idem relay"), nats.MaxReconnects(-1)}
	a := n.Auth
	switch {
	case a.User != "":
		pass := a.Password
		if a.PasswordFile != "" {
			var err error
			if pass, err = readSecret("password_file", a.PasswordFile); err != nil {
				return nil, err
			}
		}
		opts = append(opts, nats.UserInfo(a.User, pass))
	case a.Token != "":
		opts = append(opts, nats.Token(a.Token))
	case a.TokenFile != "":
		token, err := readSecret("token_file", a.TokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Token(token))
	case a.CredsFile != "":
		// The client reads the file at each connect, so a rotated
		// credential is picked up on reconnect.
		if err := checkFile("creds", a.CredsFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	case a.NkeyFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("--publish: nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if !n.TLS.Enabled {
		return opts, nil
	}
	// Secure first: RootCAs and ClientCert add to its configuration.
	opts = append(opts, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}))
	if n.TLS.CAFile != "" {
		if err := checkFile("tls_ca", n.TLS.CAFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.RootCAs(n.TLS.CAFile))
	}
	if n.TLS.CertFile != "" {
		if err := checkFile("tls_cert", n.TLS.CertFile); err != nil {
			return nil, err
		}
		if err := checkFile("tls_key", n.TLS.KeyFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.ClientCert(n.TLS.CertFile, n.TLS.KeyFile))
	}
	return opts, nil
}

// openNATS connects to every server of a nats:// URL (the client fails
// over between them and learns the rest of the cluster) and ensures the
// stream. A refused credential or certificate fails here, at start: the
// relay would otherwise only pile up a backlog.
func openNATS(ctx context.Context, publishURL string) (outbox.Publisher, error) {
	n, err := ParseNATS(publishURL)
	if err != nil {
		return nil, err
	}
	opts, err := n.options()
	if err != nil {
		return nil, err
	}
	hosts := strings.Join(n.hosts(), ",")
	nc, err := nats.Connect(strings.Join(n.Servers, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("--publish: NATS %s: %w", hosts, err)
	}
	cfg := n.Config
	cfg.CloseConn = true
	p, err := natspub.New(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("--publish: NATS %s: %w", hosts, err)
	}
	return p, nil
}

// hosts lists the servers' host:port.
func (n NATS) hosts() []string {
	hosts := make([]string, len(n.Servers))
	for i, s := range n.Servers {
		hosts[i] = strings.TrimPrefix(s, "nats://")
	}
	return hosts
}
