-- idem:compatible-from 6
-- The ledger's writes no longer pay for four foreign keys that its own
-- order of work already guarantees. Each was an AFTER trigger per row that
-- looked the referenced row up again and share-locked it: 5,000 lookups
-- for a batch of 1,000 transfers, about half of the write statement's time
-- (docs/ledger.md, "Foreign keys").
--
-- * Transfers and entries name their accounts: the ledger writes them
--   only while it holds those accounts' rows FOR UPDATE, and an account is
--   never deleted or renamed (the trigger below, which the foreign keys
--   used to imply).
-- * Entries name their transfer: the ledger writes a transfer and its two
--   entries in the same statement, from the same decision.
--
-- Verify still checks every one of them: an entry on an account that does
-- not exist, a transfer without its two entries on its own two accounts,
-- and an entry that no transfer owns are violations.
--
-- Kept: a reversal's link to its original and a reversed total's to its
-- transfer. They cost a lookup per reversal only (NULL links are not
-- looked up), and the database stays the last word on what a reversal
-- names, beside the reversed total's CHECK.
--
-- A binary of migration 6 writes in the same order under the same locks,
-- and never deletes or renames an account, so it keeps serving here.
--
-- Serving processes write to these tables while this runs: every lock the
-- migration needs is taken at once, first, so that its wait for them is
-- the only one (the migrator bounds it and tries again rather than hold up
-- or deadlock a request that holds one of them), and in the order a
-- transfer takes them, accounts before transfers, so that the requests in
-- flight finish rather than wait for it.
LOCK TABLE ledger_accounts, ledger_transfers, ledger_entries IN ACCESS EXCLUSIVE MODE;
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_tenant_debit_account_id_fkey;
ALTER TABLE ledger_transfers DROP CONSTRAINT ledger_transfers_tenant_credit_account_id_fkey;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_tenant_account_id_fkey;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_tenant_transfer_id_fkey;

-- Accounts stay mutable caches of their newest entry, but the rows and
-- their keys are kept: entries and transfers name them. Statement-level,
-- and UPDATE OF fires only for a statement that sets tenant or id, so the
-- ledger's own moves of totals never run it.
CREATE TRIGGER ledger_accounts_kept BEFORE UPDATE OF tenant, id OR DELETE OR TRUNCATE ON ledger_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION idem_ledger_refuse_change();
