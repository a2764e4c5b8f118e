package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/driver/sqlite"
)

// The second copy of a request gets the first one's stored outcome, marked
// as a replay, and the work does not run again.
func ExampleKeeper_Do() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example-")
	defer os.RemoveAll(dir)
	d, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	k, err := idem.New(d, idem.Config{})
	if err != nil {
		log.Fatal(err)
	}

	req := idem.Request{
		// The sender's stable id, scoped by tenant and operation.
		Key:  idem.Key{Scope: "acme", Operation: "charge", Key: "order-42"},
		Body: []byte(`{"amount":1500}`),
	}
	runs := 0
	charge := func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		runs++ // write business rows and outbox messages through tx here
		return idem.Outcome{Status: 201, Body: []byte(`{"charge":"ch_1"}`)}, nil
	}
	for range 2 {
		res, err := k.Do(ctx, req, charge)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Status, string(res.Body), "replayed:", res.Replayed)
	}
	fmt.Println("runs:", runs)
	// Output:
	// 201 {"charge":"ch_1"} replayed: false
	// 201 {"charge":"ch_1"} replayed: true
	// runs: 1
}

// A copy with the same key but a different body is refused: the key was
// reused for another request.
func ExampleReusedError() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example-")
	defer os.RemoveAll(dir)
	d, _ := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "idem.db")})
	defer d.Close()
	_ = d.Migrate(ctx)
	k, _ := idem.New(d, idem.Config{})
	key := idem.Key{Scope: "acme", Operation: "charge", Key: "order-42"}
	work := func(ctx context.Context, tx driver.Tx) (idem.Outcome, error) {
		return idem.Outcome{Status: 201}, nil
	}
	_, _ = k.Do(ctx, idem.Request{Key: key, Body: []byte(`{"amount":1500}`)}, work)
	_, err := k.Do(ctx, idem.Request{Key: key, Body: []byte(`{"amount":9900}`)}, work)
	fmt.Println(errors.Is(err, idem.ErrKeyReused))
	// Output: true
}
