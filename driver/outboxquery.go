package driver

import (
	"context"
	"time"
)

// OutboxQueries are a driver's statements for the outbox reads and shard
// leases whose Go side is the same on every database: the driver gives its
// SQL and how it binds and decodes, and BrowseOutbox, GetOutbox and
// ReleaseShards run them, so the two drivers differ only in their dialect.
type OutboxQueries struct {
	// Row decodes one row of the driver's outbox columns.
	Row func(Row) (OutboxRow, error)

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

	// Secret reads the secret of name $1; SecretInit stores value $2 under
	// name $1 unless one is stored.
	Secret, SecretInit string
	// FailRow records attempt $2 and error $3 on row $1, dead at $5 when
	// $4; Hold holds key ($1, $2) until $3, for good when $4.
	FailRow, Hold string
	// Redrive makes dead letter $1 live and returns its tenant and key;
	// Unhold turns that key's hold into a backoff until $3 unless another
	// dead letter holds it.
	Redrive, Unhold string
	// DeleteSent deletes at most $2 rows sent before $1; DeleteHolds the
	// holds that expired before $1.
	DeleteSent, DeleteHolds string
	// Time binds a moment as the driver stores it.
	Time func(time.Time) any
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

// OutboxSecret implements OutboxDriver.OutboxSecret with a driver's
// queries.
func OutboxSecret(ctx context.Context, tx Tx, q *OutboxQueries, p *OutboxSecretParams) ([]byte, error) {
	var v []byte
	if err := tx.QueryRow(ctx, q.Secret, p.Name).Scan(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// OutboxSecretInit implements OutboxDriver.OutboxSecretInit with a
// driver's queries.
func OutboxSecretInit(ctx context.Context, tx Tx, q *OutboxQueries, p *OutboxSecretInitParams) error {
	_, err := tx.Exec(ctx, q.SecretInit, p.Name, p.Value)
	return err
}

// OutboxFail implements OutboxDriver.OutboxFail with a driver's queries.
func OutboxFail(ctx context.Context, tx Tx, q *OutboxQueries, p *OutboxFailParams) error {
	if _, err := tx.Exec(ctx, q.FailRow, p.ID, p.Attempts, p.Error, p.Dead, q.Time(p.Now)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, q.Hold, p.Tenant, p.Key, q.Time(p.HoldUntil), p.Dead)
	return err
}

// OutboxRedrive implements OutboxDriver.OutboxRedrive with a driver's
// queries.
func OutboxRedrive(ctx context.Context, tx Tx, q *OutboxQueries, p *OutboxRedriveParams) error {
	var tenant, key string
	if err := tx.QueryRow(ctx, q.Redrive, p.ID).Scan(&tenant, &key); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, q.Unhold, tenant, key, q.Time(p.Until))
	return err
}

// OutboxDeleteSent implements OutboxDriver.OutboxDeleteSent with a
// driver's queries.
func OutboxDeleteSent(ctx context.Context, tx Tx, q *OutboxQueries, p *OutboxDeleteSentParams) (int, error) {
	n, err := tx.Exec(ctx, q.DeleteSent, q.Time(p.Before), p.Limit)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, q.DeleteHolds, q.Time(p.HoldsBefore)); err != nil {
		return 0, err
	}
	return int(n), nil
}
