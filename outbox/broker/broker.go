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
//	nats://host:port[?stream=IDEM&duplicates=10m]   an external NATS server
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
	u, err := url.Parse(publishURL)
	if err != nil {
		return nil, fmt.Errorf("--publish: %w", err)
	}
	q := u.Query()
	switch u.Scheme {
	case "nats":
		cfg := natspub.Config{Stream: q.Get("stream")}
		if s := q.Get("duplicates"); s != "" {
			if cfg.Duplicates, err = time.ParseDuration(s); err != nil {
				return nil, fmt.Errorf("--publish: duplicates: %w", err)
			}
		}
		server := *u
		server.RawQuery = ""
		nc, err := nats.Connect(server.String(), nats.Name("idem relay"), nats.MaxReconnects(-1))
		if err != nil {
			return nil, fmt.Errorf("--publish: connect %s: %w", u.Host, err)
		}
		p, err := natspub.New(ctx, nc, true, cfg)
		if err != nil {
			nc.Close()
			return nil, err
		}
		return p, nil
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
