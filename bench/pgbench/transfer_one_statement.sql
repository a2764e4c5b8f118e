-- The one-statement ceiling for POST /v1/transfers: everything one first
-- arrival writes, in ONE statement and so one transaction and one commit —
-- the key row with its stored answer, the transfer, its two entries with
-- running totals, the two accounts' totals moved, the transfer.created
-- outbox row. No lookups, no refusals decided, no separate claim: the least
-- a database must do per transfer, which group commit is measured against.
-- Debits always come from acc-1..500 and credits go to acc-501..1000, so the
-- two row locks are taken in one order and concurrent statements queue
-- instead of deadlocking.
\set k random(1, 9000000000000000)
\set a random(1, 500)
\set b random(501, 1000)
WITH clock AS (
  SELECT clock_timestamp() AS at
), k AS (
  INSERT INTO idem_keys (scope, operation, key, fingerprint, status, header, body, created_at, expires_at)
  SELECT 'bench', 'POST /v1/transfers', 'one-' || :k, decode(repeat('ab', 32), 'hex'), 201,
         convert_to('{"Content-Type":["application/json"],"Location":["/v1/transfers/x"]}', 'UTF8'),
         convert_to(repeat('x', 280), 'UTF8'), clock.at, clock.at + interval '24 hours'
    FROM clock
), d AS (
  UPDATE ledger_accounts AS acc
     SET debits_posted = acc.debits_posted + 100, sequence = acc.sequence + 1,
         last_entry_at = greatest(clock.at, acc.last_entry_at)
    FROM clock
   WHERE acc.tenant = 'bench' AND acc.id = 'acc-' || :a
  RETURNING acc.sequence, acc.debits_posted, acc.credits_posted, acc.last_entry_at
), c AS (
  UPDATE ledger_accounts AS acc
     SET credits_posted = acc.credits_posted + 100, sequence = acc.sequence + 1,
         last_entry_at = greatest(clock.at, acc.last_entry_at)
    FROM clock, d
   WHERE acc.tenant = 'bench' AND acc.id = 'acc-' || :b
  RETURNING acc.sequence, acc.debits_posted, acc.credits_posted, acc.last_entry_at
), t AS (
  INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
  SELECT 'bench', 'one-' || :k, 'acc-' || :a, 'acc-' || :b, 100, 'EUR', greatest(d.last_entry_at, c.last_entry_at)
    FROM d, c
  RETURNING created_at
), e AS (
  INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
  SELECT 'bench', 'acc-' || :a, d.sequence, 'one-' || :k, 100, false, d.debits_posted, d.credits_posted, t.created_at FROM d, t
  UNION ALL
  SELECT 'bench', 'acc-' || :b, c.sequence, 'one-' || :k, 100, true, c.debits_posted, c.credits_posted, t.created_at FROM c, t
)
INSERT INTO idem_outbox (id, tenant, type, okey, shard, payload, created_at)
SELECT gen_random_uuid(), 'bench', 'transfer.created', 'transfer/one-' || :k, (:k::bigint % 64)::integer,
       convert_to(repeat('x', 180), 'UTF8'), t.created_at
  FROM t;
