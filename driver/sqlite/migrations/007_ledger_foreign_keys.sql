-- idem:compatible-from 6
-- Accounts are kept: see the Postgres migration of the same number, which
-- drops the ledger's foreign keys to accounts and gives ledger_accounts
-- this guard in their place. SQLite keeps its foreign keys (dropping one
-- rebuilds the table); the triggers make both drivers refuse the same
-- statements, with the same error.
CREATE TRIGGER ledger_accounts_no_rekey BEFORE UPDATE OF tenant, id ON ledger_accounts
BEGIN SELECT RAISE(ABORT, 'idem: immutable: ledger_accounts refuses UPDATE'); END;
CREATE TRIGGER ledger_accounts_no_delete BEFORE DELETE ON ledger_accounts
BEGIN SELECT RAISE(ABORT, 'idem: immutable: ledger_accounts refuses DELETE'); END;
