-- ledger.Post of one transfer as plain SQL, without the keeper: the same
-- statements driver/postgres/ledger.go runs (lock the id and the accounts,
-- look for the id, append transfer and entries, move the totals).
\set k random(1, 9000000000000000)
\set a random(1, 500)
\set b random(501, 1000)
BEGIN;
SELECT count(pg_advisory_xact_lock(hashtextextended('idem.ledger.transfer/bench/lp-' || :k, 0)));
SELECT max(debits_posted) FILTER (WHERE id = 'acc-' || :a) AS dd,
       max(sequence)      FILTER (WHERE id = 'acc-' || :a) AS ds,
       max(credits_posted) FILTER (WHERE id = 'acc-' || :a) AS dc,
       max(debits_posted) FILTER (WHERE id = 'acc-' || :b) AS cd,
       max(sequence)      FILTER (WHERE id = 'acc-' || :b) AS cs,
       max(credits_posted) FILTER (WHERE id = 'acc-' || :b) AS cc
  FROM (SELECT id, debits_posted, credits_posted, sequence FROM ledger_accounts
         WHERE tenant = 'bench' AND id IN ('acc-' || :a, 'acc-' || :b)
         ORDER BY id FOR UPDATE) AS locked
\gset
SELECT id FROM ledger_transfers WHERE tenant = 'bench' AND id = 'lp-' || :k;
\set nds :ds + 1
\set ndd :dd + 100
\set ncs :cs + 1
\set ncc :cc + 100
WITH clock AS (
  SELECT clock_timestamp() AS at
), t AS (
  INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at)
  SELECT 'bench', 'lp-' || :k, 'acc-' || :a, 'acc-' || :b, 100, 'EUR', clock.at FROM clock
  RETURNING created_at
), e AS (
  INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
  SELECT 'bench', 'acc-' || :a, :nds::bigint, 'lp-' || :k, 100, false, :ndd::bigint, :dc::bigint, t.created_at FROM t
  UNION ALL
  SELECT 'bench', 'acc-' || :b, :ncs::bigint, 'lp-' || :k, 100, true, :cd::bigint, :ncc::bigint, t.created_at FROM t
), u AS (
  UPDATE ledger_accounts AS acc
     SET debits_posted = v.d, credits_posted = v.c, sequence = v.s, last_entry_at = t.created_at
    FROM t, (VALUES ('acc-' || :a, :ndd::bigint, :dc::bigint, :nds::bigint),
                    ('acc-' || :b, :cd::bigint, :ncc::bigint, :ncs::bigint)) AS v(id, d, c, s)
   WHERE acc.tenant = 'bench' AND acc.id = v.id
)
SELECT created_at FROM t;
COMMIT;
