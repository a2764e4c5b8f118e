// Package broker opens the outbox publisher a --publish / IDEM_PUBLISH
// value names, for idem relay and idem serve.
package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemhq/idem/internal/embeddednats"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/kafka"
	"github.com/idemhq/idem/outbox/natspub"
	"github.com/idemhq/idem/outbox/stdout"
	"github.com/idemhq/idem/outbox/webhookpub"
)

// Options are what a publish URL does not say.
type Options struct {
	// DataDir is the embedded NATS server's directory. Default
	// ./idem-data/nats.
	DataDir string
	// WebhookSecret signs webhooks (whsec_…). Required for http(s) URLs.
	WebhookSecret string
	// Stdout is where the stdout publisher writes. Default os.Stdout.
	Stdout io.Writer
}

// Open opens the publisher publishURL names:
//
//	""                          embedded NATS JetStream, data in Options.DataDir
//	nats://host:port[,host:port…][?stream=IDEM&duplicates=10m&replicas=1]
//	                            an external NATS server or cluster
//	kafka://host:port[,host:port…][?topic=idem]     Kafka
//	http://…, https://…         Standard Webhooks to that URL
//	stdout                      JSON lines, for development
func Open(ctx context.Context, publishURL string, opts Options) (outbox.Publisher, error) {
	switch {
	case publishURL == "":
		dir := opts.DataDir
		if dir == "" {
			dir = filepath.Join("idem-data", "nats")
		}
		srv, err := embeddednats.Start(embeddednats.Config{DataDir: dir})
		if err != nil {
			return nil, err
		}
		nc, err := srv.Connect()
		if err != nil {
			srv.Shutdown()
			return nil, err
		}
		p, err := natspub.New(ctx, nc, true, natspub.Config{})
		if err != nil {
			nc.Close()
			srv.Shutdown()
			return nil, err
		}
		return &embedded{Publisher: p, srv: srv}, nil
	case publishURL == "stdout":
		return stdout.New(opts.Stdout), nil
	}
	if strings.HasPrefix(publishURL, "nats://") {
		return openNATS(ctx, publishURL)
	}
	u, err := url.Parse(publishURL)
	if err != nil {
		return nil, fmt.Errorf("--publish: %w", err)
	}
	q := u.Query()
	switch u.Scheme {
	case "kafka":
		return kafka.New(kafka.Config{Brokers: strings.Split(u.Host, ","), Topic: q.Get("topic")})
	case "http", "https":
		if opts.WebhookSecret == "" {
			return nil, errors.New("--publish: webhooks need a signing secret (--webhook-secret / IDEM_WEBHOOK_SECRET)")
		}
		return webhookpub.New(webhookpub.Config{URL: publishURL, Secret: opts.WebhookSecret})
	}
	return nil, fmt.Errorf("--publish %q: want nats://…, kafka://…, http(s)://…, stdout, or nothing for embedded NATS", u.Redacted())
}

// NATS is a parsed nats:// publish URL.
type NATS struct {
	// Servers are the URLs to connect to, each nats://[user[:pass]@]host:port;
	// the client moves to another when one goes down.
	Servers []string
	// Config is the stream configuration the query sets.
	Config natspub.Config
}

// ParseNATS parses nats://host:port[,host:port…][?stream=S&duplicates=D&replicas=N].
// Hosts after the first may repeat the nats:// scheme. url.Parse cannot
// read a host list, so each host is parsed on its own.
func ParseNATS(publishURL string) (NATS, error) {
	var n NATS
	rest, ok := strings.CutPrefix(publishURL, "nats://")
	if !ok {
		return n, errors.New("--publish: a NATS URL starts with nats://")
	}
	hosts, query, _ := strings.Cut(rest, "?")
	for h := range strings.SplitSeq(hosts, ",") {
		h = strings.TrimPrefix(strings.TrimSpace(h), "nats://")
		u, err := url.Parse("nats://" + h)
		if err != nil || h == "" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return n, fmt.Errorf("--publish: NATS server %q: want host:port, comma-separated", redactHost(h))
		}
		if len(n.Servers) == maxNATSServers {
			return n, fmt.Errorf("--publish: more than %d NATS servers", maxNATSServers)
		}
		n.Servers = append(n.Servers, "nats://"+u.Host)
		if u.User != nil {
			n.Servers[len(n.Servers)-1] = "nats://" + u.User.String() + "@" + u.Host
		}
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return n, fmt.Errorf("--publish: query: %w", err)
	}
	for k := range q {
		if k != "stream" && k != "duplicates" && k != "replicas" {
			return n, fmt.Errorf("--publish: unknown NATS option %q (want stream, duplicates, replicas)", k)
		}
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

// maxNATSServers bounds the host list of one NATS URL.
const maxNATSServers = 32

// redactHost hides a password in a host for an error message.
func redactHost(h string) string {
	if at := strings.LastIndex(h, "@"); at >= 0 {
		return "…@" + h[at+1:]
	}
	return h
}

// openNATS connects to every server of a nats:// URL (the client fails
// over between them and learns the rest of the cluster) and ensures the
// stream.
func openNATS(ctx context.Context, publishURL string) (outbox.Publisher, error) {
	n, err := ParseNATS(publishURL)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(strings.Join(n.Servers, ","), nats.Name("idem relay"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("--publish: connect %s: %w", hostsOf(n.Servers), err)
	}
	p, err := natspub.New(ctx, nc, true, n.Config)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return p, nil
}

// hostsOf lists the servers' host:port, without credentials.
func hostsOf(servers []string) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = redactHost(strings.TrimPrefix(s, "nats://"))
	}
	return strings.Join(hosts, ",")
}

// embedded owns the in-process server behind its publisher.
type embedded struct {
	*natspub.Publisher
	srv *embeddednats.Server
}

func (e *embedded) Close() error {
	err := e.Publisher.Close()
	e.srv.Shutdown()
	return err
}
