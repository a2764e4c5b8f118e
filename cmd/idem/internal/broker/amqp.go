package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/amqppub"
)

// AMQP is a parsed amqp:// or amqps:// publish URL (RabbitMQ).
type AMQP struct {
	// URL is the broker's address for the client: scheme, credentials,
	// host, port and vhost, without idem's options.
	URL string
	// Config is the publisher's configuration the query sets (not URL or
	// TLS).
	Config amqppub.Config
	// TLS is how the client encrypts: on for amqps://.
	TLS TLS
	// PasswordFile (password_file) holds the user's password.
	PasswordFile string
}

// amqpOptions are the query keys of an AMQP URL, besides route.TYPE.
var amqpOptions = append([]string{"exchange", "exchange_kind", "declare", "password_file",
	"route", "format", "ce_source"}, tlsOptions...)

// ParseAMQP parses
//
//	amqp[s]://[user[:password]@]host[:port][/vhost][?exchange=X&exchange_kind=topic&declare=true
//	          &password_file=F&route=T&route.TYPE=KEY&format=F&ce_source=S
//	          &tls_ca=F&tls_cert=F&tls_key=F]
//
// amqps:// is TLS (port 5671 by default; amqp:// 5672). Unknown options
// are refused.
func ParseAMQP(publishURL string) (AMQP, error) {
	var a AMQP
	lower := strings.ToLower(publishURL)
	if !strings.HasPrefix(lower, "amqp://") && !strings.HasPrefix(lower, "amqps://") {
		return a, errors.New("--publish: a RabbitMQ URL starts with amqp:// or amqps://")
	}
	base, query, _ := strings.Cut(publishURL, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return a, fmt.Errorf("--publish: query: %w", err)
	}
	if a.Config.Routes, err = parseRoutes(q); err != nil {
		return a, err
	}
	if err := checkOptions(q, "RabbitMQ", amqpOptions); err != nil {
		return a, err
	}
	u, err := amqp.ParseURI(base)
	if err != nil {
		return a, fmt.Errorf("--publish: RabbitMQ %s: %v", redactHost(strings.SplitN(base, "://", 2)[1]), redactErr(err, base))
	}
	if a.TLS, err = parseTLS(q, u.Scheme == "amqps"); err != nil {
		return a, err
	}
	if a.TLS.Enabled && u.Scheme != "amqps" {
		return a, errors.New("--publish: TLS to RabbitMQ is amqps:// (port 5671 by default)")
	}
	a.PasswordFile = q.Get("password_file")
	if q.Has("password_file") && a.PasswordFile == "" {
		return a, errors.New("--publish: password_file: want a file path")
	}
	userinfo, _, _ := strings.Cut(strings.SplitN(base, "://", 2)[1], "@")
	if a.PasswordFile != "" && (!strings.Contains(base, "@") || strings.Contains(userinfo, ":")) {
		return a, errors.New("--publish: password_file needs the user name alone before the host: amqp://USER@host?password_file=…")
	}
	a.URL = base
	c := &a.Config
	c.Exchange, c.ExchangeKind = q.Get("exchange"), q.Get("exchange_kind")
	if s := q.Get("declare"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return a, fmt.Errorf("--publish: declare %q: want true or false", s)
		}
		c.NoDeclare = !b
	}
	if c.CloudEvents, err = parseCloudEvents(q); err != nil {
		return a, err
	}
	return a, nil
}

// redactErr is err's text without the URL's password, which amqp091's
// parse errors may quote.
func redactErr(err error, rawURL string) string {
	s := err.Error()
	if u, perr := url.Parse(rawURL); perr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "…")
		}
	}
	return s
}

// openAMQP connects to RabbitMQ and declares (or checks) the exchange: an
// unreachable broker, an untrusted certificate or refused credentials
// fail here, at start.
func openAMQP(ctx context.Context, publishURL string) (outbox.Publisher, error) {
	a, err := ParseAMQP(publishURL)
	if err != nil {
		return nil, err
	}
	cfg := a.Config
	cfg.URL = a.URL
	if a.PasswordFile != "" {
		pass, err := readSecret("password_file", a.PasswordFile)
		if err != nil {
			return nil, err
		}
		u, _ := amqp.ParseURI(a.URL)
		u.Password = pass
		cfg.URL = u.String()
	}
	if a.TLS.Enabled {
		if cfg.TLS, err = a.TLS.config(); err != nil {
			return nil, err
		}
	}
	p, err := amqppub.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--publish: RabbitMQ %s: %w", Redact(a.URL), err)
	}
	return p, nil
}
