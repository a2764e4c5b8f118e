package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem/driver/sqlite"
)

// boundSQLite is bound's counterpart on SQLite: the least any HTTP service
// on idem's SQLite schema, with idem's settings (the write-ahead log,
// synchronous=FULL, one writer), must do for a first arrival. Each
// transfer writes what the one-statement ceiling writes, as six prepared
// statements (SQLite has no data-modifying WITH): the key row with its
// stored answer, the two accounts' totals moved, the transfer, its two
// entries, the transfer.created outbox row. A batch of them is one
// transaction and one commit. No key read or claim, no lookups or
// refusals, no answer built, no relay.
//
// With idemWork it is the least program doing what idem does for a first
// arrival on SQLite: a request's Idempotency-Key is required and its body
// checked as strict JSON and decoded whole (serveBatches), and the key's
// row is written as idem writes it: claimed before the batch's transfers,
// its answer stored after them, all in the batch's transaction.
//
// The file is created and migrated if new, with the accounts acc-1…acc-n
// of tenant bench.
func boundSQLite(addr, path string, accounts, batchMax, bodyBytes int, idemWork bool) error {
	b, err := openSQLiteBound(context.Background(), path, accounts)
	if err != nil {
		return err
	}
	defer b.close()
	b.idemWork = idemWork
	return serveBatches(addr, batchMax, bytes.Repeat([]byte("x"), bodyBytes), idemWork, b.commit)
}

// sqliteBound holds the writer's connection and its prepared statements.
type sqliteBound struct {
	d        *sqlite.Driver
	conn     *sql.Conn
	stmts    [len(boundSQLiteStatements)]*sql.Stmt
	idemWork bool // claims and answers apart, keyed by the requests' keys
}

func openSQLiteBound(ctx context.Context, path string, accounts int) (_ *sqliteBound, err error) {
	b := &sqliteBound{}
	if b.d, err = sqlite.Open(ctx, sqlite.Config{Path: path}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if err := b.d.Migrate(ctx); err != nil {
		return nil, err
	}
	if b.conn, err = b.d.DB().Conn(ctx); err != nil {
		return nil, err
	}
	if _, err := b.conn.ExecContext(ctx, `INSERT INTO ledger_accounts
		(tenant, id, currency, debits_must_not_exceed_credits, credits_must_not_exceed_debits, created_at)
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
		SELECT 'bench', 'acc-' || i, 'EUR', 0, 0, ?1 FROM n WHERE true
		ON CONFLICT DO NOTHING`, time.Now().UnixMicro(), accounts); err != nil {
		return nil, fmt.Errorf("accounts: %w", err)
	}
	for i, q := range boundSQLiteStatements {
		if b.stmts[i], err = b.conn.PrepareContext(ctx, q); err != nil {
			return nil, fmt.Errorf("statement %d: %w", i, err)
		}
	}
	return b, nil
}

func (b *sqliteBound) close() {
	for _, s := range b.stmts {
		if s != nil {
			s.Close()
		}
	}
	if b.conn != nil {
		b.conn.Close()
	}
	b.d.Close()
}

// The stored answer's parts, the same for every transfer.
var (
	boundHeader      = []byte(`{"Content-Type":["application/json"],"Location":["/v1/transfers/x"]}`)
	boundFingerprint = make([]byte, 32)
	boundAnswer      = []byte(strings.Repeat("x", 280))
	boundPayload     = []byte(strings.Repeat("x", 180))
)

// commit writes the transfers in one IMMEDIATE transaction.
func (b *sqliteBound) commit(taken []transfer) (err error) {
	ctx := context.Background()
	if _, err := b.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = b.conn.ExecContext(ctx, "ROLLBACK")
		}
	}()
	at := time.Now().UnixMicro()
	if b.idemWork {
		for _, t := range taken {
			if _, err := b.stmts[claimStmt].ExecContext(ctx, t.key, boundFingerprint, at, at+24*time.Hour.Microseconds()); err != nil {
				return err
			}
		}
	}
	for _, t := range taken {
		if err := b.write(ctx, t, at); err != nil {
			return err
		}
	}
	if b.idemWork {
		for _, t := range taken {
			if _, err := b.stmts[answerStmt].ExecContext(ctx, boundHeader, boundAnswer, t.key); err != nil {
				return err
			}
		}
	}
	_, err = b.conn.ExecContext(ctx, "COMMIT")
	return err
}

func (b *sqliteBound) write(ctx context.Context, t transfer, at int64) error {
	id := fmt.Sprint("one-", t.k)
	da, ca := fmt.Sprint("acc-", t.a), fmt.Sprint("acc-", t.b)
	var dseq, dd, dc, dat, cseq, cd, cc, cat int64
	if !b.idemWork {
		if _, err := b.stmts[0].ExecContext(ctx, id, boundFingerprint, boundHeader, boundAnswer,
			at, at+24*time.Hour.Microseconds()); err != nil {
			return err
		}
	}
	if err := b.stmts[1].QueryRowContext(ctx, at, da).Scan(&dseq, &dd, &dc, &dat); err != nil {
		return fmt.Errorf("debit %s: %w", da, err)
	}
	if err := b.stmts[2].QueryRowContext(ctx, at, ca).Scan(&cseq, &cd, &cc, &cat); err != nil {
		return fmt.Errorf("credit %s: %w", ca, err)
	}
	at = max(dat, cat)
	if _, err := b.stmts[3].ExecContext(ctx, id, da, ca, at); err != nil {
		return err
	}
	if _, err := b.stmts[4].ExecContext(ctx, da, dseq, id, dd, dc, at, ca, cseq, cd, cc); err != nil {
		return err
	}
	_, err := b.stmts[5].ExecContext(ctx, fmt.Sprint(t.k), "transfer/"+id, t.k%64, boundPayload, at)
	return err
}

// What one transfer writes on SQLite, in the order boundSQLite runs them;
// with idem's work the key's claim and its answer, apart, replace the
// first.
var boundSQLiteStatements = [...]string{
	`INSERT INTO idem_keys (scope, operation, key, fingerprint, status, header, body, created_at, expires_at)
	 VALUES ('bench', 'POST /v1/transfers', ?, ?, 201, ?, ?, ?, ?)`,
	`UPDATE ledger_accounts SET debits_posted = debits_posted + 100, sequence = sequence + 1,
	        last_entry_at = max(?1, coalesce(last_entry_at, ?1))
	  WHERE tenant = 'bench' AND id = ?2
	 RETURNING sequence, debits_posted, credits_posted, last_entry_at`,
	`UPDATE ledger_accounts SET credits_posted = credits_posted + 100, sequence = sequence + 1,
	        last_entry_at = max(?1, coalesce(last_entry_at, ?1))
	  WHERE tenant = 'bench' AND id = ?2
	 RETURNING sequence, debits_posted, credits_posted, last_entry_at`,
	`INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
	 VALUES ('bench', ?, ?, ?, 100, 'EUR', ?)`,
	`INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
	 VALUES ('bench', ?1, ?2, ?3, 100, 0, ?4, ?5, ?6), ('bench', ?7, ?8, ?3, 100, 1, ?9, ?10, ?6)`,
	`INSERT INTO idem_outbox (id, tenant, type, okey, shard, payload, created_at)
	 VALUES (?, 'bench', 'transfer.created', ?, ?, ?, ?)`,
	claimStmt: `INSERT INTO idem_keys (scope, operation, key, fingerprint, status, created_at, expires_at)
	 VALUES ('bench', 'POST /v1/transfers', ?, ?, 0, ?, ?)`,
	answerStmt: `UPDATE idem_keys SET status = 201, header = ?, body = ?
	  WHERE scope = 'bench' AND operation = 'POST /v1/transfers' AND key = ?`,
}

// The statements of idem's work (boundSQLiteStatements).
const (
	claimStmt  = 6
	answerStmt = 7
)
