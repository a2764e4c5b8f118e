package inbox_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
	"github.com/idemhq/idem/inbox"
)

// A broker delivers the same message twice; the consumer's work runs once.
// The work and the inbox record commit together, before the ack.
func ExampleInbox_Process() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "inbox-example-")
	defer os.RemoveAll(dir)
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(d, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}

	emails := 0
	for range 2 { // the delivery and its redelivery
		tx, err := d.Begin(ctx, driver.BeginOptions{})
		if err != nil {
			log.Fatal(err)
		}
		dup, err := in.Process(ctx, tx, inbox.Delivery{Consumer: "mailer", MessageID: "0193a5e0-7c1f-7000-8000-000000000001"}, func(ctx context.Context, tx driver.Tx) error {
			emails++ // write the consumer's rows through tx
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			log.Fatal(err)
		}
		fmt.Println("duplicate:", dup) // ack the message now
	}
	fmt.Println("emails:", emails)
	// Output:
	// duplicate: false
	// duplicate: true
	// emails: 1
}
