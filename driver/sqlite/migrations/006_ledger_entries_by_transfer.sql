-- A transfer's entries by the transfer, for Verify's join of each transfer
-- to its two entries. SQLite joins only by nested loops, and without this
-- index the only one it could use searched the entries by tenant alone for
-- every transfer: quadratic, minutes at 60,000 entries. (Postgres hashes or
-- merges the join instead: see its migration of the same number.) The
-- index holds everything that join reads (the entry's side, account,
-- amount and time; its sequence comes with the primary key), so a transfer
-- costs one descent and no lookup of the row: a lookup per entry was most
-- of the time at a million entries. The driver's query names the index
-- (INDEXED BY), so the planner cannot fall back to the search by tenant.
-- The build holds the write lock while it sorts the entries: about 1.5 s
-- of CPU per million entries (a 2-core VM).
CREATE INDEX IF NOT EXISTS ledger_entries_transfer
    ON ledger_entries (tenant, transfer_id, credit, account_id, amount, created_at);
