-- Holds: two-phase transfers. See the Postgres migration of the same
-- number. SQLite adds a column's constraints with it, so the checks that
-- span columns are column constraints here, and pending_id has no foreign
-- key (one to the (tenant, id) key cannot be added to a table in place):
-- the ledger names only holds it has read, and Verify checks every link.
ALTER TABLE ledger_accounts ADD COLUMN debits_pending INTEGER NOT NULL DEFAULT 0 CHECK (debits_pending >= 0);
ALTER TABLE ledger_accounts ADD COLUMN credits_pending INTEGER NOT NULL DEFAULT 0 CHECK (credits_pending >= 0);

ALTER TABLE ledger_transfers ADD COLUMN pending_id TEXT;
ALTER TABLE ledger_transfers ADD COLUMN settles TEXT
    CHECK ((settles IS NULL) = (pending_id IS NULL) AND (settles IS NULL OR settles IN ('post', 'void', 'expire')));
ALTER TABLE ledger_transfers ADD COLUMN pending INTEGER NOT NULL DEFAULT 0
    CHECK (NOT pending OR (pending_id IS NULL AND reverses_id IS NULL));
ALTER TABLE ledger_transfers ADD COLUMN timeout_seconds INTEGER
    CHECK (timeout_seconds IS NULL OR (timeout_seconds BETWEEN 1 AND 34560000 AND pending));
ALTER TABLE ledger_transfers ADD COLUMN expires_at INTEGER
    CHECK ((timeout_seconds IS NULL) = (expires_at IS NULL));

CREATE UNIQUE INDEX ledger_transfers_settled_once ON ledger_transfers (tenant, pending_id)
    WHERE pending_id IS NOT NULL;

ALTER TABLE ledger_entries ADD COLUMN pending_change INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ledger_entries ADD COLUMN pending_only INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ledger_entries ADD COLUMN debits_pending INTEGER NOT NULL DEFAULT 0 CHECK (debits_pending >= 0);
ALTER TABLE ledger_entries ADD COLUMN credits_pending INTEGER NOT NULL DEFAULT 0 CHECK (credits_pending >= 0);

CREATE TABLE ledger_holds (
    tenant             TEXT    NOT NULL,
    transfer_id        TEXT    NOT NULL,
    debit_account_id   TEXT    NOT NULL,
    credit_account_id  TEXT    NOT NULL,
    amount             INTEGER NOT NULL CHECK (amount > 0),
    expires_at         INTEGER,
    PRIMARY KEY (tenant, transfer_id)
) WITHOUT ROWID;

CREATE INDEX ledger_holds_expiry ON ledger_holds (expires_at) WHERE expires_at IS NOT NULL;
