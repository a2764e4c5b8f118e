package driver

import "context"

// InspectDriver holds the read-only statements of the operator tools (idem
// keys, the web console): questions an operator asks that the business
// packages never need to.
type InspectDriver interface {
	// KeyList reads the committed records of one client key in one scope,
	// under every operation that holds it, ordered by operation, at most
	// Limit. It walks the primary key (scope, operation, key) one distinct
	// operation at a time, so it costs one index probe per operation the
	// scope has used rather than a scan of the scope's keys.
	KeyList(ctx context.Context, tx Tx, p *KeyListParams) ([]KeyRecord, error)
	// BeginSnapshot starts a read-only transaction in which every statement
	// sees the same committed state (Postgres: REPEATABLE READ; SQLite: a
	// WAL read transaction). Multi-statement checks such as ledger.Verify
	// need it on a live database: under READ COMMITTED a transfer committed
	// between two statements would look like a broken invariant.
	BeginSnapshot(ctx context.Context) (TxCloser, error)
}

// KeyListParams selects the records of KeyList.
type KeyListParams struct {
	Scope string
	Key   string
	// Limit bounds both the records returned and the distinct operations
	// walked. Callers bound it (the inspect package uses 1..1000).
	Limit int
}
