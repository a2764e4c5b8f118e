package postgres

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/driver"
)

// A statement's slices go as the arrays pgx would send, from the slices
// themselves: elements, an empty array, NULL for a nil slice and for a
// nil []byte element, beside arguments that are no slices.
func TestQueuedArrays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := open(t)
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if !driver.Underlying(tx).(*ownedTx).describes() {
		t.Fatal("the driver's own pool does not describe its statements: the arrays are not queued as arrays")
	}

	at := time.Date(2026, 12, 6, 14, 2, 0, 123456000, time.UTC)
	texts, ints, bools := []string{"a", "", `q"u\o{te,}`}, []int64{0, 300, -1 << 40}, []bool{true, false}
	times, blobs := []time.Time{at, at.Add(time.Hour)}, [][]byte{[]byte("fp"), nil, {}}
	var (
		gotTexts            []string
		gotInts             []int64
		gotBools            []bool
		gotTimes            []time.Time
		gotBlobs            [][]byte
		blobNull            []bool
		nilIsNull, emptyLen any
		n                   int
	)
	read := func(rows driver.Rows) error {
		if !rows.Next() {
			return rows.Err()
		}
		return rows.Scan(&n, &gotTexts, &gotInts, &gotBools, &gotTimes, &gotBlobs, &blobNull, &nilIsNull, &emptyLen)
	}
	err = pipeline(ctx, tx, step{sql: `SELECT $1::int, $2::text[], $3::int8[], $4::bool[], $5::timestamptz[], $6::bytea[],
	       ARRAY(SELECT b IS NULL FROM unnest($6::bytea[]) b), $7::text[] IS NULL, cardinality($8::int8[])`,
		args: []any{7, texts, ints, bools, times, blobs, []string(nil), []int64{}}, read: read})
	if err != nil {
		t.Fatal(err)
	}
	if n != 7 || !slices.Equal(gotTexts, texts) || !slices.Equal(gotInts, ints) || !slices.Equal(gotBools, bools) {
		t.Errorf("got %d %q %v %v, want 7 %q %v %v", n, gotTexts, gotInts, gotBools, texts, ints, bools)
	}
	if len(gotTimes) != 2 || !gotTimes[0].Equal(times[0]) || !gotTimes[1].Equal(times[1]) {
		t.Errorf("times: got %v, want %v", gotTimes, times)
	}
	if !slices.EqualFunc(gotBlobs, blobs, bytes.Equal) || !slices.Equal(blobNull, []bool{false, true, false}) {
		t.Errorf("bytea: got %q (NULL: %v), want %q (NULL: false true false)", gotBlobs, blobNull, blobs)
	}
	if nilIsNull != true || emptyLen != int32(0) {
		t.Errorf("a nil slice is NULL: %v; an empty one has no element: %v", nilIsNull, emptyLen)
	}
}
