package postgres

import (
	"context"
	"time"

	"github.com/idemhq/idem/driver"
)

const (
	sqlDataKeys = `
SELECT tenant, version, master_key_id, wrapped, forgotten_at, created_at
  FROM idem_data_keys WHERE tenant = $1 ORDER BY version`
	sqlDataKeyInsert = `
INSERT INTO idem_data_keys (tenant, version, master_key_id, wrapped, created_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant, version) DO NOTHING`
	sqlDataKeysToRewrap = `
SELECT tenant, version, master_key_id, wrapped, forgotten_at, created_at
  FROM idem_data_keys
 WHERE forgotten_at IS NULL AND master_key_id <> $1 AND (tenant, version) > ($2, $3)
 ORDER BY tenant, version LIMIT $4`
	sqlDataKeyRewrap = `
UPDATE idem_data_keys SET master_key_id = $4, wrapped = $5
 WHERE tenant = $1 AND version = $2 AND master_key_id = $3 AND forgotten_at IS NULL`
	sqlDataKeyMasterKeys = `
SELECT master_key_id, count(*) FROM idem_data_keys
 WHERE forgotten_at IS NULL GROUP BY master_key_id ORDER BY master_key_id`
	sqlDataKeyForget = `
UPDATE idem_data_keys SET wrapped = '', master_key_id = '', forgotten_at = $2
 WHERE tenant = $1 AND forgotten_at IS NULL`
)

func (d *Driver) DataKeys(ctx context.Context, tx driver.Tx, p *driver.DataKeysParams) ([]driver.DataKeyRow, error) {
	return queryDataKeys(ctx, tx, sqlDataKeys, p.Tenant)
}

func (d *Driver) DataKeyInsert(ctx context.Context, tx driver.Tx, p *driver.DataKeyInsertParams) (bool, error) {
	n, err := tx.Exec(ctx, sqlDataKeyInsert, p.Tenant, p.Version, p.MasterKeyID, p.Wrapped, p.Now)
	return n == 1, err
}

func (d *Driver) DataKeysToRewrap(ctx context.Context, tx driver.Tx, p *driver.DataKeysToRewrapParams) ([]driver.DataKeyRow, error) {
	return queryDataKeys(ctx, tx, sqlDataKeysToRewrap, p.Newest, p.AfterTenant, p.AfterVersion, p.Limit)
}

func (d *Driver) DataKeyRewrap(ctx context.Context, tx driver.Tx, p *driver.DataKeyRewrapParams) (bool, error) {
	n, err := tx.Exec(ctx, sqlDataKeyRewrap, p.Tenant, p.Version, p.OldMasterKeyID, p.MasterKeyID, p.Wrapped)
	return n == 1, err
}

func (d *Driver) DataKeyMasterKeys(ctx context.Context, tx driver.Tx) ([]driver.MasterKeyCount, error) {
	return driver.Collect(ctx, tx, driver.ScanMasterKeyCount, sqlDataKeyMasterKeys)
}

func (d *Driver) DataKeyForget(ctx context.Context, tx driver.Tx, p *driver.DataKeyForgetParams) (int, error) {
	n, err := tx.Exec(ctx, sqlDataKeyForget, p.Tenant, p.Now)
	return int(n), err
}

func queryDataKeys(ctx context.Context, tx driver.Tx, sql string, args ...any) ([]driver.DataKeyRow, error) {
	return driver.Collect(ctx, tx, func(row driver.Row) (r driver.DataKeyRow, err error) {
		var forgotten *time.Time
		if err := row.Scan(&r.Tenant, &r.Version, &r.MasterKeyID, &r.Wrapped, &forgotten, &r.CreatedAt); err != nil {
			return r, err
		}
		if forgotten != nil {
			r.ForgottenAt = forgotten.UTC()
		}
		r.CreatedAt = r.CreatedAt.UTC()
		return r, nil
	}, sql, args...)
}
