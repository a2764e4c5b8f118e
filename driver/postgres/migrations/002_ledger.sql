-- The double-entry ledger. Transfers and entries are append-only (the
-- triggers below refuse UPDATE, DELETE and TRUNCATE): a correction is a new,
-- linked reversal, so every past belief stays answerable.

-- Accounts. debits_posted, credits_posted, sequence and last_entry_at cache
-- the account's newest entry; the ledger rewrites them only while it holds
-- the row's lock, in the same statement that appends the entry.
CREATE TABLE ledger_accounts (
    tenant                          text        NOT NULL,
    id                              text        NOT NULL,
    currency                        text        NOT NULL,
    debits_must_not_exceed_credits  boolean     NOT NULL,
    credits_must_not_exceed_debits  boolean     NOT NULL,
    metadata                        text,
    debits_posted                   bigint      NOT NULL DEFAULT 0 CHECK (debits_posted >= 0),
    credits_posted                  bigint      NOT NULL DEFAULT 0 CHECK (credits_posted >= 0),
    sequence                        bigint      NOT NULL DEFAULT 0 CHECK (sequence >= 0),
    last_entry_at                   timestamptz,
    created_at                      timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE ledger_transfers (
    tenant             text        NOT NULL,
    id                 text        NOT NULL,
    debit_account_id   text        NOT NULL,
    credit_account_id  text        NOT NULL,
    amount             bigint      NOT NULL CHECK (amount > 0),
    currency           text        NOT NULL,
    metadata           text,
    reverses_id        text,
    reason             text,
    created_at         timestamptz NOT NULL,
    PRIMARY KEY (tenant, id),
    CHECK (debit_account_id <> credit_account_id),
    FOREIGN KEY (tenant, debit_account_id) REFERENCES ledger_accounts (tenant, id),
    FOREIGN KEY (tenant, credit_account_id) REFERENCES ledger_accounts (tenant, id),
    FOREIGN KEY (tenant, reverses_id) REFERENCES ledger_transfers (tenant, id)
);

CREATE INDEX ledger_transfers_reverses ON ledger_transfers (tenant, reverses_id)
    WHERE reverses_id IS NOT NULL;

-- One row per side of a transfer, numbered per account from 1 without gaps,
-- carrying the account's running totals after it. Times never go backwards
-- within an account, so the newest entry at or before a time is one descent
-- of the (account, created_at, sequence) index: as-of answers do not grow
-- with the history.
CREATE TABLE ledger_entries (
    tenant          text        NOT NULL,
    account_id      text        NOT NULL,
    sequence        bigint      NOT NULL CHECK (sequence > 0),
    transfer_id     text        NOT NULL,
    amount          bigint      NOT NULL CHECK (amount > 0),
    credit          boolean     NOT NULL,
    debits_posted   bigint      NOT NULL CHECK (debits_posted >= 0),
    credits_posted  bigint      NOT NULL CHECK (credits_posted >= 0),
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant, account_id, sequence),
    FOREIGN KEY (tenant, account_id) REFERENCES ledger_accounts (tenant, id),
    FOREIGN KEY (tenant, transfer_id) REFERENCES ledger_transfers (tenant, id)
);

CREATE INDEX ledger_entries_as_of ON ledger_entries (tenant, account_id, created_at, sequence);

-- How much of a transfer has been reversed: the one mutable row beside the
-- immutable ones. The CHECK is the database's last word that reversals never
-- exceed the original, whatever the code above it does.
CREATE TABLE ledger_reversed_totals (
    tenant       text   NOT NULL,
    transfer_id  text   NOT NULL,
    amount       bigint NOT NULL,
    reversed     bigint NOT NULL,
    PRIMARY KEY (tenant, transfer_id),
    CHECK (reversed > 0 AND reversed <= amount),
    FOREIGN KEY (tenant, transfer_id) REFERENCES ledger_transfers (tenant, id)
);

CREATE FUNCTION idem_ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'IDM01',
        MESSAGE = format('idem: immutable: %s refuses %s', TG_TABLE_NAME, TG_OP);
END
$$;

CREATE TRIGGER ledger_transfers_immutable BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_transfers
    FOR EACH STATEMENT EXECUTE FUNCTION idem_ledger_refuse_change();
CREATE TRIGGER ledger_entries_immutable BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION idem_ledger_refuse_change();
