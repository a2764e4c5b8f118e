package outbox_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/outbox"
)

// printer is a Publisher that prints what the relay hands it, then stops
// the example.
type printer struct{ stop func() }

func (p printer) Publish(ctx context.Context, msgs []outbox.Message) []error {
	for _, m := range msgs {
		fmt.Printf("published %s %s %s\n", m.Tenant, m.Type, m.Payload)
	}
	p.stop()
	return make([]error, len(msgs))
}

func (printer) Close() error { return nil }

// A message is written in the transaction of the change that caused it,
// and a relay publishes it after the commit.
func ExampleOutbox_Enqueue() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example-")
	defer os.RemoveAll(dir)
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ob, _ := outbox.New(d, outbox.Config{})

	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		log.Fatal(err)
	}
	// ... the business rows are written through tx here ...
	if err := ob.Enqueue(ctx, tx, outbox.Message{Tenant: "acme", Type: "order.placed", Key: "order/42", Payload: []byte(`{"order":42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	st, _ := ob.Stats(ctx)
	fmt.Println("unsent:", st.Unsent)

	runCtx, cancel := context.WithCancel(ctx)
	r, err := outbox.NewRelay(d, outbox.RelayConfig{Publisher: printer{stop: cancel}})
	if err != nil {
		log.Fatal(err)
	}
	_ = r.Run(runCtx)
	st, _ = ob.Stats(ctx)
	fmt.Println("unsent:", st.Unsent)
	// Output:
	// unsent: 1
	// published acme order.placed {"order":42}
	// unsent: 0
}
