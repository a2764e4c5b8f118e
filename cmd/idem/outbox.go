package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/outbox"
)

// outboxCmd is `idem outbox stats|list --dead|redrive ID`.
func outboxCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// Only redrive writes.
	readOnly := len(args) == 0 || args[0] != "redrive"
	open := func(ctx context.Context, db, configFile string) (inspect.OutboxView, func(), error) {
		d, cfg, err := openDBConfig(ctx, db, configFile, readOnly)
		if err != nil {
			return nil, nil, err
		}
		// Dead letters show their payloads: opened as the relay opens them.
		sealer, err := openSealer(ctx, cfg, d, slog.New(slog.DiscardHandler))
		if err != nil {
			d.Close()
			return nil, nil, err
		}
		o, err := outbox.New(d, outbox.Config{Sealer: sealer})
		if err != nil {
			d.Close()
			return nil, nil, err
		}
		return inspect.NewOutboxView(o), func() { d.Close() }, nil
	}
	return inspect.RunOutbox(ctx, args, open, time.Now(), stdout, stderr)
}
