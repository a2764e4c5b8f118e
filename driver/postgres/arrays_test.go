package postgres

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

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

// Every array parameter of the driver's statements is of a type whose
// binary form, the one pgx tries first for an array, encodes from the
// driver's slices. pgx falls back to the text form after a failed try,
// which formats the whole array into an error first: a uuid[] of strings
// cost a first arrival about 3 % of the service's CPU. A parameter of
// another type goes as one of these and is cast in the statement
// ($1::text[]::uuid[]).
func TestArrayParametersEncodeInBinary(t *testing.T) {
	t.Parallel()
	one := func(x array) *array {
		x.dim[0] = pgtype.ArrayDimension{Length: 1, LowerBound: 1}
		return &x
	}
	encodes := map[string]struct {
		oid uint32
		arg *array
	}{
		"text":        {pgtype.TextArrayOID, one(array{texts: []string{"a"}})},
		"bigint":      {pgtype.Int8ArrayOID, one(array{ints: []int64{1}})},
		"int8":        {pgtype.Int8ArrayOID, one(array{ints: []int64{1}})},
		"integer":     {pgtype.Int4ArrayOID, one(array{ints: []int64{1}})},
		"int4":        {pgtype.Int4ArrayOID, one(array{ints: []int64{1}})},
		"bool":        {pgtype.BoolArrayOID, one(array{bools: []bool{true}})},
		"boolean":     {pgtype.BoolArrayOID, one(array{bools: []bool{true}})},
		"bytea":       {pgtype.ByteaArrayOID, one(array{bytes: [][]byte{{1}}})},
		"timestamptz": {pgtype.TimestamptzArrayOID, one(array{times: []time.Time{time.Now()}})},
	}
	m := pgtype.NewMap()
	for name, e := range encodes {
		if f := m.FormatCodeForOID(e.oid); f != pgtype.BinaryFormatCode {
			t.Errorf("%s[]: pgx tries format %d first, not binary", name, f)
		}
		if _, err := m.Encode(e.oid, pgtype.BinaryFormatCode, e.arg, nil); err != nil {
			t.Errorf("%s[]: %v", name, err)
		}
	}

	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\$[0-9]+::([a-z0-9_ ]+)\[\]`)
	seen := 0
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range param.FindAllStringSubmatch(string(src), -1) {
			seen++
			if _, ok := encodes[m[1]]; !ok {
				t.Errorf("%s: %s: an array parameter of %s[]: send it as text[] and cast it in the statement", f, m[0], m[1])
			}
		}
	}
	if seen == 0 {
		t.Fatal("found no array parameter in the driver's statements")
	}
}

// A connection is asked its exec mode once: pgx's Conn.Config copies the
// whole configuration, and every transaction asks.
func TestExecModeAskedOncePerConnection(t *testing.T) {
	ctx := context.Background()
	d := open(t)
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if !(&ownedTx{conn: conn}).describes() {
		t.Fatal("the driver's own pool does not describe its statements")
	}
	if n := testing.AllocsPerRun(100, func() { (&ownedTx{conn: conn}).describes() }); n != 0 {
		t.Errorf("a transaction on a connection asked before made %v allocations to learn its exec mode, want 0", n)
	}
}
