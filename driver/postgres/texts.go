package postgres

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// queue queues sql on b. On a connection whose statements' parameter
// types the server describes, its []string arguments go as texts: pgx's
// own encoding of a []string boxes every element, an allocation each,
// and idem's statements over arrays pass a few strings per request.
// Where pgx assumes the types from the Go values instead (the exec and
// simple protocol modes, behind a transaction pooler), it knows no texts.
func queue(b *pgx.Batch, t *ownedTx, sql string, args []any) {
	for i, a := range args {
		if s, ok := a.([]string); ok && t.describes() {
			args[i] = texts(s)
		}
	}
	b.Queue(sql, args...)
}

// describes reports whether the transaction's connection has the server
// describe its statements' parameter types. It is asked once per
// transaction: pgx's Conn.Config copies the whole configuration, maps and
// all, on every call.
func (t *ownedTx) describes() bool {
	if t.mode == modeUnknown {
		t.mode = modePlain
		switch t.conn.Conn().Config().DefaultQueryExecMode {
		case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec:
			t.mode = modeDescribed
		}
	}
	return t.mode == modeDescribed
}

// execMode is what ownedTx.describes learnt of the connection.
type execMode uint8

const (
	modeUnknown execMode = iota
	modePlain
	modeDescribed
)

// texts is a []string encoded as a text[] parameter element by element
// without boxing a copy of each: an element is a textRef to the slice's
// own string. A nil texts is NULL, as a nil []string is.
type texts []string

func (a texts) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a texts) Index(i int) any { return textRef{&a[i]} }

func (a texts) IndexType() any { return textRef{} }

// textRef is one element of a texts; pointer-shaped, it is boxed without
// an allocation.
type textRef struct{ s *string }

func (r textRef) TextValue() (pgtype.Text, error) { return pgtype.Text{String: *r.s, Valid: true}, nil }
