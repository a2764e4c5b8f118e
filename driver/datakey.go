package driver

import (
	"context"
	"time"
)

// DataKeyDriver holds the statements of the tenants' data keys (package
// seal): each tenant's records are sealed under a data key of its own,
// stored only wrapped by a master key (idem_data_keys). A tenant has one
// row per data key version; the newest version seals, every version not
// forgotten opens.
type DataKeyDriver interface {
	// DataKeys reads every version of the tenant's data key, oldest
	// first (none: the tenant has none yet).
	DataKeys(ctx context.Context, tx Tx, p *DataKeysParams) ([]DataKeyRow, error)
	// DataKeyInsert stores a new version of a tenant's data key. It
	// returns false, and stores nothing, when that version exists: another
	// process created it first, and its key is the one to use.
	DataKeyInsert(ctx context.Context, tx Tx, p *DataKeyInsertParams) (bool, error)
	// DataKeysToRewrap lists, in (tenant, version) order after After, at
	// most Limit data keys not forgotten and wrapped under a master key
	// other than Newest.
	DataKeysToRewrap(ctx context.Context, tx Tx, p *DataKeysToRewrapParams) ([]DataKeyRow, error)
	// DataKeyRewrap replaces a data key's wrapping when it is still
	// wrapped under OldMasterKeyID and not forgotten, and reports whether
	// it did: a concurrent forget or rotation wins.
	DataKeyRewrap(ctx context.Context, tx Tx, p *DataKeyRewrapParams) (bool, error)
	// DataKeyMasterKeys counts the data keys not forgotten by the master
	// key that wraps them.
	DataKeyMasterKeys(ctx context.Context, tx Tx) ([]MasterKeyCount, error)
	// DataKeyForget destroys the tenant's data keys not yet forgotten: it
	// overwrites their wrapped bytes and master key id with empty ones and
	// sets ForgottenAt. It returns how many it forgot.
	DataKeyForget(ctx context.Context, tx Tx, p *DataKeyForgetParams) (int, error)
}

// DataKeyRow is one version of a tenant's data key.
type DataKeyRow struct {
	Tenant      string
	Version     int
	MasterKeyID string
	Wrapped     []byte
	// ForgottenAt is when the key was destroyed; zero while it lives.
	ForgottenAt time.Time
	CreatedAt   time.Time
}

type DataKeysParams struct {
	Tenant string
}

type DataKeyInsertParams struct {
	Tenant      string
	Version     int
	MasterKeyID string
	Wrapped     []byte
	Now         time.Time
}

type DataKeysToRewrapParams struct {
	Newest string
	// AfterTenant and AfterVersion continue a listing after the last row
	// of the previous batch; the zero values start it.
	AfterTenant  string
	AfterVersion int
	Limit        int
}

type DataKeyRewrapParams struct {
	Tenant         string
	Version        int
	OldMasterKeyID string
	MasterKeyID    string
	Wrapped        []byte
}

// MasterKeyCount is how many live data keys one master key wraps.
type MasterKeyCount struct {
	MasterKeyID string
	DataKeys    int64
}

type DataKeyForgetParams struct {
	Tenant string
	Now    time.Time
}

// ScanMasterKeyCount decodes a row of DataKeyMasterKeys: the master key's
// id and its data keys.
func ScanMasterKeyCount(row Row) (c MasterKeyCount, err error) {
	return c, row.Scan(&c.MasterKeyID, &c.DataKeys)
}
