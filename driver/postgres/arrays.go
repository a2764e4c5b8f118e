package postgres

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// queue queues sql on b. On a connection whose statements' parameter
// types the server describes, its slice arguments go as arrays encoded
// element by element from the slices themselves: pgx's own encoding of a
// []string, []int64, []time.Time or [][]byte boxes every element, an
// allocation each, and a batch's statements pass arrays of a few
// elements per request. The statement's arrays take one allocation.
// Where pgx assumes the types from the Go values instead (the exec and
// simple protocol modes, behind a transaction pooler), the slices go as
// they are.
func queue(b *pgx.Batch, t *ownedTx, sql string, args []any) {
	if t.describes() {
		var arrays []array
		for i, a := range args {
			var x array
			switch s := a.(type) {
			case []string:
				x.texts = s
			case []int64:
				x.ints = s
			case []bool:
				x.bools = s
			case []time.Time:
				x.times = s
			case [][]byte:
				x.bytes = s
			}
			if x.texts == nil && x.ints == nil && x.bools == nil && x.times == nil && x.bytes == nil {
				continue // not a slice, or a nil one: NULL, as pgx sends it
			}
			if arrays == nil {
				// Room for every argument left: args point into it, and
				// an append never moves it.
				arrays = make([]array, 0, len(args)-i)
			}
			n := len(x.texts) + len(x.ints) + len(x.bools) + len(x.times) + len(x.bytes)
			x.dim[0] = pgtype.ArrayDimension{Length: int32(n), LowerBound: 1}
			arrays = append(arrays, x)
			args[i] = &arrays[len(arrays)-1]
		}
	}
	b.Queue(sql, args...)
}

// describes reports whether the transaction's connection has the server
// describe its statements' parameter types. It is asked of a connection
// once, kept in its CustomData: pgx's Conn.Config copies the whole
// configuration, maps and all, on every call.
func (t *ownedTx) describes() bool {
	if t.mode == modeUnknown {
		data := t.conn.Conn().PgConn().CustomData()
		if m, ok := data[execModeData].(execMode); ok {
			t.mode = m
		} else {
			t.mode = modePlain
			switch t.conn.Conn().Config().DefaultQueryExecMode {
			case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec:
				t.mode = modeDescribed
			}
			data[execModeData] = t.mode
		}
	}
	return t.mode == modeDescribed
}

// execModeData is where a connection's CustomData keeps what describes
// learnt of it.
const execModeData = "idem.execMode"

// execMode is what ownedTx.describes learnt of the connection.
type execMode uint8

const (
	modeUnknown execMode = iota
	modePlain
	modeDescribed
)

// array is one of its slices encoded as an array parameter, whose
// element i is a pointer to the slice's own element i: pointer-shaped, it
// is boxed without an allocation.
type array struct {
	dim   [1]pgtype.ArrayDimension
	texts []string
	ints  []int64
	bools []bool
	times []time.Time
	bytes [][]byte
}

func (a *array) Dimensions() []pgtype.ArrayDimension { return a.dim[:] }

func (a *array) Index(i int) any {
	switch {
	case a.texts != nil:
		return textRef{&a.texts[i]}
	case a.ints != nil:
		return int8Ref{&a.ints[i]}
	case a.bools != nil:
		return a.bools[i] // a bool is boxed without an allocation
	case a.times != nil:
		return timeRef{&a.times[i]}
	}
	return byteaRef{&a.bytes[i]}
}

func (a *array) IndexType() any {
	switch {
	case a.texts != nil:
		return textRef{}
	case a.ints != nil:
		return int8Ref{}
	case a.bools != nil:
		return false
	case a.times != nil:
		return timeRef{}
	}
	return byteaRef{}
}

// The elements of the arrays, each encoded as pgx encodes its value.
type (
	textRef  struct{ p *string }
	int8Ref  struct{ p *int64 }
	timeRef  struct{ p *time.Time }
	byteaRef struct{ p *[]byte } // a nil []byte is NULL
)

func (r textRef) TextValue() (pgtype.Text, error)  { return pgtype.Text{String: *r.p, Valid: true}, nil }
func (r int8Ref) Int64Value() (pgtype.Int8, error) { return pgtype.Int8{Int64: *r.p, Valid: true}, nil }
func (r timeRef) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: *r.p, Valid: true}, nil
}
func (r byteaRef) BytesValue() ([]byte, error) { return *r.p, nil }
