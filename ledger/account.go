package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem/driver"
)

// CreateAccount creates an account in the tenant. It is idempotent by id: an
// account with the same id and the same currency, flags and metadata is
// returned with Existing set; one that differs is refused with
// account_exists_with_different_<field>.
func (l *Ledger) CreateAccount(ctx context.Context, tx driver.Tx, tenant string, a NewAccount) (acc Account, err error) {
	ctx, span := l.tracer.Start(ctx, "ledger.CreateAccount")
	defer func() { endSpan(span, err) }()
	return l.createAccount(ctx, tx, tenant, a)
}

func (l *Ledger) createAccount(ctx context.Context, tx driver.Tx, tenant string, a NewAccount) (Account, error) {
	if err := l.checkTx(tx); err != nil {
		return Account{}, err
	}
	o := l.accountOp(tenant, a)
	if o.err != nil {
		return Account{}, o.err
	}
	res, err := l.apply(ctx, tx, []op{o}, true)
	if err != nil {
		return Account{}, err
	}
	return *res[0].Account, nil
}

func accountConflict(id, field string) *Error {
	return newError(ErrAccountExists.Code+field, field,
		fmt.Sprintf("account %q already exists with a different %s", id, field))
}

// GetAccount reads an account with its current totals; ErrNotFound when the
// tenant has no such account.
func (l *Ledger) GetAccount(ctx context.Context, tx driver.Tx, q AccountQuery) (Account, error) {
	row, err := l.account(ctx, tx, q.Tenant, q.ID)
	if err != nil {
		return Account{}, err
	}
	return accountFromRow(row), nil
}

func (l *Ledger) account(ctx context.Context, tx driver.Tx, tenant, id string) (*driver.LedgerAccount, error) {
	if err := l.checkTx(tx); err != nil {
		return nil, err
	}
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	if checkID("id", id) != nil {
		// An id we would never have stored names no account.
		return nil, fmt.Errorf("ledger: account %q: %w", id, ErrNotFound)
	}
	row, err := l.d.LedgerAccountGet(ctx, tx, &driver.LedgerAccountGetParams{Tenant: tenant, ID: id})
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("ledger: account %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: get account %q: %w", id, err)
	}
	return row, nil
}
