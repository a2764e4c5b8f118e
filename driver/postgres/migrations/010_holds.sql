-- Holds: two-phase transfers (docs/ledger.md, "Holds"). A hold is a
-- transfer stored with pending set: it moves nothing posted, only the
-- pending totals of its two accounts. It is settled once, by a new
-- transfer that names it in pending_id: a post (settles 'post', of at most
-- the held amount), a void or an expiry (settles 'void' or 'expire', of
-- the held amount, which moves nothing posted). The rows stay append-only,
-- and a hold's state is read from them: pending until a transfer names it,
-- then what that transfer settles. The unique index on (tenant,
-- pending_id) is the database's last word that a hold settles once, beside
-- the ledger's own check under the accounts' locks.
--
-- idem:compatible-from 6
-- A binary of migration 6 or later keeps serving here during a rolling
-- upgrade (migrations 7 and 8 are compatible from 6 too): it
-- knows nothing of holds, so the database keeps it from breaking them.
-- Its entries name no pending totals: a trigger fills them from the
-- account (whose pending totals such a binary never moves). Its balance
-- flags ignore pending amounts: CHECKs on the accounts refuse a write
-- that would spend what a hold reserves (an error for that request,
-- nothing written). It would reverse a hold: a trigger refuses that too.
-- The new binary decides all of this before writing and never meets
-- them. (It reads a hold as a plain transfer until it is replaced.)
LOCK TABLE ledger_accounts, ledger_transfers, ledger_entries IN ACCESS EXCLUSIVE MODE;

-- The accounts' pending totals are cached beside the posted ones, and
-- written in the same statement, under the same lock.
ALTER TABLE ledger_accounts
    ADD COLUMN debits_pending  bigint NOT NULL DEFAULT 0 CHECK (debits_pending >= 0),
    ADD COLUMN credits_pending bigint NOT NULL DEFAULT 0 CHECK (credits_pending >= 0),
    ADD CONSTRAINT ledger_accounts_debits_flag
        CHECK (NOT debits_must_not_exceed_credits OR debits_posted + debits_pending <= credits_posted),
    ADD CONSTRAINT ledger_accounts_credits_flag
        CHECK (NOT credits_must_not_exceed_debits OR credits_posted + credits_pending <= debits_posted);

-- expires_at is the hold's recorded time plus its timeout, stored so that
-- the expiry worker and the ledger compare one value.
ALTER TABLE ledger_transfers
    ADD COLUMN pending         boolean NOT NULL DEFAULT false,
    ADD COLUMN timeout_seconds bigint CHECK (timeout_seconds BETWEEN 1 AND 34560000),
    ADD COLUMN expires_at      timestamptz,
    ADD COLUMN pending_id      text,
    ADD COLUMN settles         text CHECK (settles IN ('post', 'void', 'expire')),
    ADD CONSTRAINT ledger_transfers_settles_names_hold CHECK ((pending_id IS NULL) = (settles IS NULL)),
    ADD CONSTRAINT ledger_transfers_hold_is_plain CHECK (NOT pending OR (pending_id IS NULL AND reverses_id IS NULL)),
    ADD CONSTRAINT ledger_transfers_timeout_of_hold CHECK ((timeout_seconds IS NULL) = (expires_at IS NULL)
                                                          AND (pending OR timeout_seconds IS NULL)),
    ADD CONSTRAINT ledger_transfers_settles_fkey FOREIGN KEY (tenant, pending_id) REFERENCES ledger_transfers (tenant, id);

CREATE UNIQUE INDEX ledger_transfers_settled_once ON ledger_transfers (tenant, pending_id)
    WHERE pending_id IS NOT NULL;

-- Each entry carries its account's pending totals after it, as it carries
-- the posted ones, so that an as-of read answers both from one entry.
-- pending_change is the entry's change to its side's pending total (a
-- hold: +amount; a settlement: minus the held amount; otherwise 0), and
-- pending_only marks an entry that leaves the posted totals alone (a hold,
-- a void, an expiry): Verify recomputes the running totals from them.
ALTER TABLE ledger_entries
    ADD COLUMN pending_change  bigint  NOT NULL DEFAULT 0,
    ADD COLUMN pending_only    boolean NOT NULL DEFAULT false,
    ADD COLUMN debits_pending  bigint  NOT NULL DEFAULT 0 CHECK (debits_pending >= 0),
    ADD COLUMN credits_pending bigint  NOT NULL DEFAULT 0 CHECK (credits_pending >= 0);
-- The existing entries got 0; a new one names its pending totals, or the
-- trigger below fills them (NOT NULL is checked after it).
ALTER TABLE ledger_entries
    ALTER COLUMN debits_pending DROP DEFAULT,
    ALTER COLUMN credits_pending DROP DEFAULT;

-- An entry written by a binary that knows no holds carries its account's
-- pending totals unchanged. WHEN keeps the function from running for the
-- ledger's own entries, which always name them.
CREATE FUNCTION idem_ledger_entry_pending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT a.debits_pending, a.credits_pending INTO NEW.debits_pending, NEW.credits_pending
      FROM ledger_accounts a WHERE a.tenant = NEW.tenant AND a.id = NEW.account_id;
    RETURN NEW;
END
$$;
CREATE TRIGGER ledger_entries_pending_filled BEFORE INSERT ON ledger_entries
    FOR EACH ROW WHEN (NEW.debits_pending IS NULL OR NEW.credits_pending IS NULL)
    EXECUTE FUNCTION idem_ledger_entry_pending();

-- A hold, a void and an expiry moved nothing posted: a reversal of one is
-- refused here too, for a binary that knows no holds.
CREATE FUNCTION idem_ledger_reverses_posted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger_transfers o
                WHERE o.tenant = NEW.tenant AND o.id = NEW.reverses_id
                  AND (o.pending OR o.settles IN ('void', 'expire'))) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'check_violation',
            MESSAGE = format('idem: transfer %s moved nothing posted and cannot be reversed', NEW.reverses_id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER ledger_transfers_reverse_posted BEFORE INSERT ON ledger_transfers
    FOR EACH ROW WHEN (NEW.reverses_id IS NOT NULL)
    EXECUTE FUNCTION idem_ledger_reverses_posted();

-- The holds not settled yet: a cache like the accounts' totals, the one
-- place the expiry worker and GET /v1/transfers?status=pending look, so
-- that neither walks the holds settled long ago. The ledger inserts a row
-- with its hold and deletes it with the settlement, in the same
-- statement; Verify checks it against the transfers.
CREATE TABLE ledger_holds (
    tenant             text        NOT NULL,
    transfer_id        text        NOT NULL,
    debit_account_id   text        NOT NULL,
    credit_account_id  text        NOT NULL,
    amount             bigint      NOT NULL CHECK (amount > 0),
    expires_at         timestamptz,
    PRIMARY KEY (tenant, transfer_id)
);

CREATE INDEX ledger_holds_expiry ON ledger_holds (expires_at) WHERE expires_at IS NOT NULL;
