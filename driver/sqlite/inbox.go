package sqlite

import (
	"context"
	"errors"

	"github.com/idemhq/idem/driver"
)

// SQLite serializes writers, so a concurrent twin never sees an
// uncommitted claim: its BEGIN IMMEDIATE waits for the writer instead.
const sqlInboxClaim = `
INSERT INTO idem_inbox (consumer, message_id, processed_at) VALUES (?1, ?2, ?3)
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING 1`

const sqlInboxDeleteBefore = `
DELETE FROM idem_inbox WHERE (consumer, message_id) IN (
  SELECT consumer, message_id FROM idem_inbox WHERE processed_at < ?1 LIMIT ?2)`

func (d *Driver) InboxClaim(ctx context.Context, tx driver.Tx, p *driver.InboxClaimParams) (bool, error) {
	var one int
	err := tx.QueryRow(ctx, sqlInboxClaim, p.Consumer, p.MessageID, toMicros(p.Now)).Scan(&one)
	if errors.Is(err, driver.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (d *Driver) InboxDeleteBefore(ctx context.Context, tx driver.Tx, p *driver.InboxDeleteBeforeParams) (int, error) {
	n, err := tx.Exec(ctx, sqlInboxDeleteBefore, toMicros(p.Before), p.Limit)
	return int(n), err
}
