// Package broker opens the outbox publisher a --publish / IDEM_PUBLISH
// value names, for idem relay and idem serve.
package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem/cmd/idem/internal/embeddednats"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
	"github.com/idemhq/idem/outbox/natspub"
	"github.com/idemhq/idem/outbox/stdout"
	"github.com/idemhq/idem/outbox/webhookpub"
)

// Config configures Open with what a publish URL does not say. The zero
// value is usable, except for http(s) URLs, which need WebhookSecret.
type Config struct {
	// DataDir is the embedded NATS server's directory. Default
	// ./idem-data/nats.
	DataDir string
	// WebhookSecret signs webhooks (whsec_…). Required for http(s) URLs.
	WebhookSecret string
	// WebhookFormat is the body of webhooks: idem (default), cloudevents,
	// cloudevents-structured or both (the query of a webhook URL is the
	// receiver's, so this is a setting of its own).
	WebhookFormat string
	// Stdout is where the stdout publisher writes. Default os.Stdout.
	Stdout io.Writer
}

// Open opens the publisher publishURL names and, for a broker, connects:
// an unreachable broker, an untrusted certificate, a refused credential or
// a missing file is an error here, naming the broker and the cause, with
// the URL's secrets hidden (see Redact).
//
//	""                          embedded NATS JetStream, data in Config.DataDir
//	nats://host:port[,host:port…][?stream=IDEM&duplicates=10m&replicas=1]
//	                            an external NATS server or cluster (ParseNATS
//	                            lists the credential and TLS options)
//	tls://host:port[,…][?…]     the same over TLS
//	kafka://host:port[,host:port…][?topic=idem]
//	                            Kafka (ParseKafka lists the SASL and TLS options)
//	amqp://[user:pass@]host:port[/vhost][?exchange=idem]
//	amqps://…                   RabbitMQ (ParseAMQP lists the options)
//	http://…, https://…         Standard Webhooks to that URL
//	stdout                      JSON lines, for development
func Open(ctx context.Context, publishURL string, cfg Config) (outbox.Publisher, error) {
	switch {
	case publishURL == "":
		dir := cfg.DataDir
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
		p, err := natspub.New(ctx, nc, natspub.Config{CloseConn: true})
		if err != nil {
			nc.Close()
			srv.Shutdown()
			return nil, err
		}
		return &embedded{Publisher: p, srv: srv}, nil
	case publishURL == "stdout":
		return stdout.New(stdout.Config{Writer: cfg.Stdout})
	}
	scheme, _, _ := strings.Cut(publishURL, "://")
	switch strings.ToLower(scheme) { // as url.Parse reads http(s) schemes
	case "nats", "tls":
		return openNATS(ctx, publishURL)
	case "kafka":
		return openKafka(ctx, publishURL)
	case "amqp", "amqps":
		return openAMQP(ctx, publishURL)
	case "http", "https":
		if cfg.WebhookSecret == "" {
			return nil, errors.New("--publish: webhooks need a signing secret (--webhook-secret / IDEM_WEBHOOK_SECRET)")
		}
		f, err := cloudevent.ParseFormat(cfg.WebhookFormat)
		if err != nil {
			return nil, fmt.Errorf("--webhook-format: %w", err)
		}
		return webhookpub.New(webhookpub.Config{URL: publishURL, Secret: cfg.WebhookSecret,
			CloudEvents: cloudevent.Config{Format: f}})
	}
	return nil, fmt.Errorf("--publish %q: want nats://…, tls://…, kafka://…, amqp(s)://…, http(s)://…, stdout, or nothing for embedded NATS",
		Redact(publishURL))
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
