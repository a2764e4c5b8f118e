package driver

import "context"

// OutboxQueries are a driver's statements for the outbox reads and shard
// leases whose Go side is the same on every database: the driver gives its
// SQL and how it binds and decodes, and BrowseOutbox, GetOutbox and
// ReleaseShards run them, so the two drivers differ only in their dialect.
type OutboxQueries struct {
	// Row decodes one row of the driver's outbox columns.
	Row func(Rows) (OutboxRow, error)

	// BrowseScanned returns the count and the lowest id (text, "" for
	// none) of the ids a browse walks: those below $1 and above $2,
	// newest first, at most $3. Browse reads the rows among them of tenant
	// $4, type $5 and key $6 ("" matching any), newest first, at most $7.
	BrowseScanned, Browse string
	// Get reads the row of id $1.
	Get string

	// ShardRelease frees owner $1's leases on the shards $2 (bound as
	// Shards encodes them); ShardReleaseAll frees all of owner $1's, and
	// ForgetRelay removes its heartbeat.
	ShardRelease, ShardReleaseAll, ForgetRelay string
	Shards                                     func([]int) any
}

// The open sides of a browse's id range: the lowest and highest UUID, which
// no message Enqueue writes has.
const (
	lowestUUID  = "00000000-0000-0000-0000-000000000000"
	highestUUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"
)

// BrowseOutbox implements OutboxInspectDriver.OutboxBrowse with a driver's
// queries.
func BrowseOutbox(ctx context.Context, tx Tx, q *OutboxQueries, p *OutboxBrowseParams) (*OutboxBrowsed, error) {
	before, after := p.BeforeID, p.AfterID
	if before == "" {
		before = highestUUID
	}
	if after == "" {
		after = lowestUUID
	}
	var b OutboxBrowsed
	if err := tx.QueryRow(ctx, q.BrowseScanned, before, after, p.ScanLimit).Scan(&b.Scanned, &b.Lowest); err != nil {
		return nil, err
	}
	var err error
	b.Rows, err = Collect(ctx, tx, q.Row, q.Browse, before, after, p.ScanLimit, p.Tenant, p.Type, p.Key, p.Limit)
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// GetOutbox implements OutboxInspectDriver.OutboxGet with a driver's queries.
func GetOutbox(ctx context.Context, tx Tx, q *OutboxQueries, p *OutboxGetParams) (*OutboxRow, error) {
	rows, err := Collect(ctx, tx, q.Row, q.Get, p.ID)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, ErrNotFound
	}
	return &rows[0], nil
}

// ReleaseShards implements OutboxDriver.OutboxShardRelease with a driver's
// queries.
func ReleaseShards(ctx context.Context, tx Tx, q *OutboxQueries, p *OutboxShardParams) error {
	if p.Shards != nil {
		_, err := tx.Exec(ctx, q.ShardRelease, p.Owner, q.Shards(p.Shards))
		return err
	}
	if _, err := tx.Exec(ctx, q.ShardReleaseAll, p.Owner); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, q.ForgetRelay, p.Owner)
	return err
}
