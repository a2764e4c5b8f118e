package seal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/driver"
)

var (
	// ErrUnknownTenant: Forget found no data key of the tenant: nothing of
	// it was ever sealed (a tenant name misspelt, or data written without
	// encryption at rest).
	ErrUnknownTenant = errors.New("idem/seal: the tenant has no data key")
	// ErrAlreadyForgotten: Forget found every data key of the tenant
	// forgotten already; nothing was changed.
	ErrAlreadyForgotten = errors.New("idem/seal: the tenant's data keys are already forgotten")
)

// Forget destroys the tenant's data keys in one transaction: their wrapped
// bytes are overwritten and they are marked forgotten, so that what was
// sealed under them can never be opened again, in this database or in any
// backup taken from now on (a backup taken before still holds the wrapped
// keys; see docs/operations.md, "Encryption at rest"). It returns how many
// data key versions it destroyed, ErrUnknownTenant when the tenant has
// none, and ErrAlreadyForgotten when all were forgotten before.
//
// Running Envelopes stop opening the tenant's records within their
// Config.Recheck; records a tenant writes afterwards are sealed under a
// new data key version.
func Forget(ctx context.Context, store Store, tenant string, now time.Time) (int, error) {
	tx, err := store.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	rows, err := store.DataKeys(ctx, tx, &driver.DataKeysParams{Tenant: tenant})
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, fmt.Errorf("%w: tenant %q", ErrUnknownTenant, tenant)
	}
	n, err := store.DataKeyForget(ctx, tx, &driver.DataKeyForgetParams{Tenant: tenant, Now: now.UTC()})
	if err != nil {
		return 0, err
	}
	if n == 0 {
		// Every version was forgotten, by an earlier forget or by one that
		// committed while this one waited for the rows.
		last := rows[len(rows)-1].ForgottenAt
		if last.IsZero() {
			return 0, fmt.Errorf("%w: tenant %q, by a forget that ran at the same time", ErrAlreadyForgotten, tenant)
		}
		return 0, fmt.Errorf("%w: tenant %q, at %s", ErrAlreadyForgotten, tenant, last.Format(time.RFC3339))
	}
	return n, tx.Commit(ctx)
}

// MasterKeyUse is how many live (not forgotten) data keys one master key
// wraps.
type MasterKeyUse struct {
	ID       string
	DataKeys int64
}

// MasterKeysInUse lists the master keys that wrap live data keys, by id.
func MasterKeysInUse(ctx context.Context, store Store) ([]MasterKeyUse, error) {
	tx, err := store.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	counts, err := store.DataKeyMasterKeys(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("idem/seal: count data keys by master key: %w", err)
	}
	out := make([]MasterKeyUse, len(counts))
	for i, c := range counts {
		out[i] = MasterKeyUse{ID: c.MasterKeyID, DataKeys: c.DataKeys}
	}
	return out, nil
}

// CheckSource returns an error wrapping ErrUnknownMasterKey, naming the
// ids, when live data keys are wrapped under master keys source does not
// hold: every record of those tenants would fail to open, so a process
// refuses to start on it rather than fail request after request. The
// usual causes are the wrong key file, and an old key removed before
// idem keys rotate moved every data key off it.
func CheckSource(ctx context.Context, store Store, source KeySource) error {
	used, err := MasterKeysInUse(ctx, store)
	if err != nil {
		return err
	}
	held := source.IDs()
	var missing []string
	var n int64
	for _, u := range used {
		if !slices.Contains(held, u.ID) {
			missing = append(missing, u.ID)
			n += u.DataKeys
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d data keys in the database are wrapped under master keys %s, which the key source does not hold "+
		"(it holds %s): the wrong key file, or a key removed before idem keys rotate moved every data key off it",
		ErrUnknownMasterKey, n, strings.Join(missing, ", "), strings.Join(held, ", "))
}

// RotateConfig tunes Rotate.
type RotateConfig struct {
	// Batch is how many data keys one transaction re-wraps. Default 100;
	// bound 1..10,000.
	Batch int
	// Progress, when set, is called after each batch with the data keys
	// re-wrapped so far and how many needed it when Rotate began.
	Progress func(done, total int64)
}

// Rotate re-wraps every live data key that a master key other than
// source's newest wraps, under the newest, in batches of one transaction
// each, and returns how many it re-wrapped. It is resumable: a run that
// stops part way leaves every data key wrapped under one key or the other,
// and the next run continues with those still under an old one. The data
// keys themselves do not change, so records need no rewriting and
// running Envelopes keep their cached keys.
//
// A data key forgotten or re-wrapped by another process meanwhile is
// left as that process left it.
func Rotate(ctx context.Context, store Store, source KeySource, cfg RotateConfig) (int64, error) {
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	if cfg.Batch < 1 || cfg.Batch > 10_000 {
		return 0, fmt.Errorf("idem/seal: rotate batch %d is outside 1..10000", cfg.Batch)
	}
	newest := source.Newest()
	used, err := MasterKeysInUse(ctx, store)
	if err != nil {
		return 0, err
	}
	var total, done int64
	for _, u := range used {
		if u.ID != newest {
			total += u.DataKeys
		}
	}
	after := driver.DataKeysToRewrapParams{Newest: newest, Limit: cfg.Batch}
	for {
		n, last, err := rotateBatch(ctx, store, source, after)
		if err != nil {
			return done, err
		}
		if last == nil {
			return done, nil
		}
		done += n
		after.AfterTenant, after.AfterVersion = last.Tenant, last.Version
		if cfg.Progress != nil {
			cfg.Progress(done, total)
		}
	}
}

// rotateBatch re-wraps one batch after p's position. It returns how many
// it re-wrapped and the batch's last row (nil: nothing was left).
func rotateBatch(ctx context.Context, store Store, source KeySource, p driver.DataKeysToRewrapParams) (int64, *driver.DataKeyRow, error) {
	tx, err := store.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		return 0, nil, err
	}
	defer tx.Rollback(ctx)
	rows, err := store.DataKeysToRewrap(ctx, tx, &p)
	if err != nil || len(rows) == 0 {
		return 0, nil, err
	}
	var n int64
	for _, r := range rows {
		raw, err := source.Unwrap(ctx, r.MasterKeyID, r.Wrapped)
		if err != nil {
			return 0, nil, fmt.Errorf("idem/seal: rotate tenant %q's data key version %d: %w", r.Tenant, r.Version, err)
		}
		id, wrapped, err := source.Wrap(ctx, raw)
		clear(raw)
		if err != nil {
			return 0, nil, fmt.Errorf("idem/seal: rotate tenant %q's data key version %d: %w", r.Tenant, r.Version, err)
		}
		ok, err := store.DataKeyRewrap(ctx, tx, &driver.DataKeyRewrapParams{Tenant: r.Tenant, Version: r.Version,
			OldMasterKeyID: r.MasterKeyID, MasterKeyID: id, Wrapped: wrapped})
		if err != nil {
			return 0, nil, err
		}
		if ok {
			n++
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, nil, err
	}
	return n, &rows[len(rows)-1], nil
}
