package postgres

import (
	"context"
	"errors"

	"github.com/idemhq/idem/driver"
)

// On a conflict the insert returns no row. A claim held by a transaction
// still running makes this one wait for its end: after a commit it is a
// duplicate, after a rollback this one claims.
const sqlInboxClaim = `
INSERT INTO idem_inbox (consumer, message_id, processed_at) VALUES ($1, $2, $3)
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING true`

const sqlInboxDeleteBefore = `
DELETE FROM idem_inbox WHERE ctid IN (
  SELECT ctid FROM idem_inbox WHERE processed_at < $1 LIMIT $2)`

func (d *Driver) InboxClaim(ctx context.Context, tx driver.Tx, p *driver.InboxClaimParams) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, sqlInboxClaim, p.Consumer, p.MessageID, p.Now).Scan(&ok)
	if errors.Is(err, driver.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (d *Driver) InboxDeleteBefore(ctx context.Context, tx driver.Tx, p *driver.InboxDeleteBeforeParams) (int, error) {
	n, err := tx.Exec(ctx, sqlInboxDeleteBefore, p.Before, p.Limit)
	return int(n), err
}
