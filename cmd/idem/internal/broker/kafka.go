package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
	"github.com/idemhq/idem/outbox/kafka"
)

// Kafka is a parsed kafka:// publish URL.
type Kafka struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// Topic receives every message Routes does not send elsewhere; "" is
	// kafka.Config's default.
	Topic string
	// Routes (route=TEMPLATE, route.TYPE=TOPIC) map types to topics.
	Routes outbox.Routes
	// CloudEvents (format, ce_source) is the wire format.
	CloudEvents cloudevent.Config
	// TLS is how the client encrypts.
	TLS TLS
	// SASL is the mechanism (sasl): "plain", "scram-sha-256",
	// "scram-sha-512", or "" for none.
	SASL string
	// User and Password come from the URL's user:password@, or User from
	// user@ with PasswordFile (password_file). The password is a secret:
	// Redact hides it from the URL, and no error shows it.
	User, Password, PasswordFile string
}

// kafkaOptions are the query keys of a Kafka URL.
var kafkaOptions = append([]string{"topic", "sasl", "password_file", "route", "format", "ce_source"}, tlsOptions...)

// saslMechanisms are the values of sasl=.
var saslMechanisms = []string{"plain", "scram-sha-256", "scram-sha-512"}

// ParseKafka parses
//
//	kafka://[user[:password]@]host:port[,host:port…][?topic=T&sasl=M&password_file=F
//	        &tls=true&tls_ca=F&tls_cert=F&tls_key=F&route=T&route.TYPE=TOPIC&format=F&ce_source=S]
//
// Credentials need sasl (plain, scram-sha-256 or scram-sha-512) and
// sasl needs them; sasl=plain needs TLS. Unknown options are refused.
func ParseKafka(publishURL string) (Kafka, error) {
	var k Kafka
	if !strings.HasPrefix(publishURL, "kafka://") {
		return k, errors.New("--publish: a Kafka URL starts with kafka://")
	}
	l, err := parseHostList(publishURL, "Kafka broker", "kafka")
	if err != nil {
		return k, err
	}
	k.Brokers = l.hosts
	q := l.query
	if k.Routes, err = parseRoutes(q); err != nil {
		return k, err
	}
	if err := checkOptions(q, "Kafka", kafkaOptions); err != nil {
		return k, err
	}
	if k.CloudEvents, err = parseCloudEvents(q); err != nil {
		return k, err
	}
	if k.TLS, err = parseTLS(q, false); err != nil {
		return k, err
	}
	k.Topic, k.SASL, k.PasswordFile = q.Get("topic"), q.Get("sasl"), q.Get("password_file")
	if q.Has("password_file") && k.PasswordFile == "" {
		return k, errors.New("--publish: password_file: want a file path")
	}
	hasPass := false
	if l.user != nil {
		k.User = l.user.Username()
		k.Password, hasPass = l.user.Password()
	}
	if hasPass && k.PasswordFile != "" {
		return k, errors.New("--publish: a password both in the URL and in password_file; give one")
	}
	switch {
	case k.SASL == "" && k.User != "":
		return k, fmt.Errorf("--publish: Kafka credentials need sasl=%s", strings.Join(saslMechanisms, "|"))
	case k.SASL == "" && k.PasswordFile != "":
		return k, errors.New("--publish: password_file needs sasl and the user name: kafka://USER@host?sasl=…&password_file=…")
	case k.SASL == "":
	case !slices.Contains(saslMechanisms, k.SASL):
		return k, fmt.Errorf("--publish: sasl %q: want %s", k.SASL, strings.Join(saslMechanisms, ", "))
	case k.User == "":
		return k, errors.New("--publish: sasl needs the user name before the host: kafka://USER[:PASSWORD]@host")
	case !hasPass && k.PasswordFile == "":
		return k, errors.New("--publish: sasl needs a password: kafka://USER:PASSWORD@host or password_file")
	case k.SASL == "plain" && !k.TLS.Enabled:
		// PLAIN sends the password as it is: without TLS anyone on the
		// path reads it. SCRAM never sends it.
		return k, errors.New("--publish: sasl=plain sends the password in clear: add tls=true (or tls_ca=…), or use sasl=scram-sha-256 or scram-sha-512")
	}
	return k, nil
}

// options are the client options the URL asks for. It reads the password
// file and the TLS files, and fails on one it cannot use, naming the
// option.
func (k Kafka) options() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if k.SASL != "" {
		pass := k.Password
		if k.PasswordFile != "" {
			var err error
			if pass, err = readSecret("password_file", k.PasswordFile); err != nil {
				return nil, err
			}
		}
		var m sasl.Mechanism
		switch k.SASL {
		case "plain":
			m = plain.Auth{User: k.User, Pass: pass}.AsMechanism()
		case "scram-sha-256":
			m = scram.Auth{User: k.User, Pass: pass}.AsSha256Mechanism()
		case "scram-sha-512":
			m = scram.Auth{User: k.User, Pass: pass}.AsSha512Mechanism()
		}
		opts = append(opts, kgo.SASL(m))
	}
	if k.TLS.Enabled {
		c, err := k.TLS.config()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(c))
	}
	return opts, nil
}

// config is the client's TLS configuration for franz-go, which has no
// loader of its own (nats.go's RootCAs and ClientCert do this for NATS).
// franz-go sets the server name from each broker's host as it dials.
func (t TLS) config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--publish: tls_ca: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--publish: tls_ca %s: no PEM certificate in it", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--publish: tls_cert, tls_key: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// kafkaPingTimeout bounds the check at open that a broker answers and
// accepts the client's certificate and credentials.
const kafkaPingTimeout = 15 * time.Second

// openKafka opens a producer and asks the cluster for its metadata: an
// unreachable cluster, an untrusted certificate or refused credentials
// fail here, at start, rather than as a silent backlog.
func openKafka(ctx context.Context, publishURL string) (outbox.Publisher, error) {
	k, err := ParseKafka(publishURL)
	if err != nil {
		return nil, err
	}
	opts, err := k.options()
	if err != nil {
		return nil, err
	}
	p, err := kafka.New(kafka.Config{Brokers: k.Brokers, Topic: k.Topic, Routes: k.Routes, CloudEvents: k.CloudEvents, Opts: opts})
	if err != nil {
		return nil, fmt.Errorf("--publish: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, kafkaPingTimeout)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("--publish: Kafka %s: %w", strings.Join(k.Brokers, ","), err)
	}
	return p, nil
}
