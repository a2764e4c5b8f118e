-- The double-entry ledger: see the Postgres migration of the same number.
-- Times are integer microseconds since the Unix epoch (UTC); booleans are
-- 0 or 1.
CREATE TABLE ledger_accounts (
    tenant                          TEXT    NOT NULL,
    id                              TEXT    NOT NULL,
    currency                        TEXT    NOT NULL,
    debits_must_not_exceed_credits  INTEGER NOT NULL,
    credits_must_not_exceed_debits  INTEGER NOT NULL,
    metadata                        TEXT,
    debits_posted                   INTEGER NOT NULL DEFAULT 0 CHECK (debits_posted >= 0),
    credits_posted                  INTEGER NOT NULL DEFAULT 0 CHECK (credits_posted >= 0),
    sequence                        INTEGER NOT NULL DEFAULT 0 CHECK (sequence >= 0),
    last_entry_at                   INTEGER,
    created_at                      INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;

CREATE TABLE ledger_transfers (
    tenant             TEXT    NOT NULL,
    id                 TEXT    NOT NULL,
    debit_account_id   TEXT    NOT NULL,
    credit_account_id  TEXT    NOT NULL,
    amount             INTEGER NOT NULL CHECK (amount > 0),
    currency           TEXT    NOT NULL,
    metadata           TEXT,
    reverses_id        TEXT,
    reason             TEXT,
    created_at         INTEGER NOT NULL,
    PRIMARY KEY (tenant, id),
    CHECK (debit_account_id <> credit_account_id),
    FOREIGN KEY (tenant, debit_account_id) REFERENCES ledger_accounts (tenant, id),
    FOREIGN KEY (tenant, credit_account_id) REFERENCES ledger_accounts (tenant, id),
    FOREIGN KEY (tenant, reverses_id) REFERENCES ledger_transfers (tenant, id)
) WITHOUT ROWID;

CREATE INDEX ledger_transfers_reverses ON ledger_transfers (tenant, reverses_id)
    WHERE reverses_id IS NOT NULL;

CREATE TABLE ledger_entries (
    tenant          TEXT    NOT NULL,
    account_id      TEXT    NOT NULL,
    sequence        INTEGER NOT NULL CHECK (sequence > 0),
    transfer_id     TEXT    NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    credit          INTEGER NOT NULL,
    debits_posted   INTEGER NOT NULL CHECK (debits_posted >= 0),
    credits_posted  INTEGER NOT NULL CHECK (credits_posted >= 0),
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (tenant, account_id, sequence),
    FOREIGN KEY (tenant, account_id) REFERENCES ledger_accounts (tenant, id),
    FOREIGN KEY (tenant, transfer_id) REFERENCES ledger_transfers (tenant, id)
) WITHOUT ROWID;

CREATE INDEX ledger_entries_as_of ON ledger_entries (tenant, account_id, created_at, sequence);

CREATE TABLE ledger_reversed_totals (
    tenant       TEXT    NOT NULL,
    transfer_id  TEXT    NOT NULL,
    amount       INTEGER NOT NULL,
    reversed     INTEGER NOT NULL,
    PRIMARY KEY (tenant, transfer_id),
    CHECK (reversed > 0 AND reversed <= amount),
    FOREIGN KEY (tenant, transfer_id) REFERENCES ledger_transfers (tenant, id)
) WITHOUT ROWID;

CREATE TRIGGER ledger_transfers_no_update BEFORE UPDATE ON ledger_transfers
BEGIN SELECT RAISE(ABORT, 'idem: immutable: ledger_transfers refuses UPDATE'); END;
CREATE TRIGGER ledger_transfers_no_delete BEFORE DELETE ON ledger_transfers
BEGIN SELECT RAISE(ABORT, 'idem: immutable: ledger_transfers refuses DELETE'); END;
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'idem: immutable: ledger_entries refuses UPDATE'); END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'idem: immutable: ledger_entries refuses DELETE'); END;
