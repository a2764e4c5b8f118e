package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"

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

// A Batcher commits the first arrivals of the moment together: one
// transaction claims their keys, runs the work for all of them (set-based
// statements, where the work can) and stores each one's answer. Each
// request still gets its own answer, and a copy is replayed as by Do.
func ExampleBatcher() {
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

	// The work of one batch: an answer per order, in order. A refusal
	// that must not be stored would set ItemResult.Err instead.
	charge := func(ctx context.Context, tx driver.Tx, orders []string) ([]idem.ItemResult, error) {
		out := make([]idem.ItemResult, len(orders))
		for i, order := range orders {
			// Write the business rows of all the orders through tx here.
			out[i].Outcome = idem.Outcome{Status: 201, Body: []byte(`{"charged":"` + order + `"}`)}
		}
		return out, nil
	}
	b, err := idem.NewBatcher(k, charge, idem.BatchConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background()) //nolint:errcheck // no deadline: it waits

	do := func(order string) idem.Result {
		req := idem.Request{Key: idem.Key{Scope: "acme", Operation: "charge", Key: order}, Body: []byte(`{"amount":1500}`)}
		res, err := b.Do(ctx, req, order)
		if err != nil {
			log.Fatal(err)
		}
		return res
	}
	orders := []string{"order-1", "order-2", "order-3"}
	results := make([]idem.Result, len(orders))
	var wg sync.WaitGroup
	for i, order := range orders {
		wg.Go(func() { results[i] = do(order) })
	}
	wg.Wait()
	for _, res := range results {
		fmt.Println(res.Status, string(res.Body), "replayed:", res.Replayed)
	}
	res := do("order-2")
	fmt.Println(res.Status, string(res.Body), "replayed:", res.Replayed)
	// Output:
	// 201 {"charged":"order-1"} replayed: false
	// 201 {"charged":"order-2"} replayed: false
	// 201 {"charged":"order-3"} replayed: false
	// 201 {"charged":"order-2"} replayed: true
}
