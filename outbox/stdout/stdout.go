// Package stdout publishes outbox messages as JSON lines on a writer
// (standard output by default): a broker for development that shows what
// the relay would send.
package stdout

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"

	"github.com/idemhq/idem/outbox"
)

// Line is one message as written.
type Line struct {
	ID        string            `json:"id"`
	Tenant    string            `json:"tenant"`
	Type      string            `json:"type"`
	Key       string            `json:"ordering_key"`
	CreatedAt time.Time         `json:"created_at"`
	Headers   map[string]string `json:"headers,omitempty"`
	Payload   json.RawMessage   `json:"payload"`
}

// Config configures New. The zero value is usable.
type Config struct {
	// Writer receives the lines. Default os.Stdout.
	Writer io.Writer
}

// Publisher writes one line per message.
type Publisher struct {
	mu sync.Mutex
	w  io.Writer
}

// New returns a publisher writing to cfg.Writer. It never fails; the error
// is there so that every constructor reads alike.
func New(cfg Config) (*Publisher, error) {
	if cfg.Writer == nil {
		cfg.Writer = os.Stdout
	}
	return &Publisher{w: cfg.Writer}, nil
}

func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	p.mu.Lock()
	defer p.mu.Unlock()
	enc := json.NewEncoder(p.w)
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			errs[i] = outbox.BrokerUnavailable(err)
			continue
		}
		errs[i] = enc.Encode(Line{ID: m.ID, Tenant: m.Tenant, Type: m.Type, Key: m.Key,
			CreatedAt: m.CreatedAt, Headers: m.Headers, Payload: m.Payload})
	}
	return errs
}

func (p *Publisher) Close() error { return nil }
