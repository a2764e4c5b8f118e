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
  FROM (SELECT x.id, x.debits_posted, x.credits_posted, x.sequence
          FROM (SELECT DISTINCT unnest(ARRAY['acc-' || :a, 'acc-' || :b]) AS want ORDER BY want) AS w
         CROSS JOIN LATERAL (SELECT * FROM ledger_accounts x WHERE x.tenant = 'bench' AND x.id = w.want LIMIT 1 FOR UPDATE) AS x
         ORDER BY w.want) AS locked
\gset
SELECT x.id FROM (SELECT DISTINCT unnest(ARRAY['lp-' || :k]) AS want ORDER BY want) AS w
 CROSS JOIN LATERAL (SELECT * FROM ledger_transfers x WHERE x.tenant = 'bench' AND x.id = w.want LIMIT 1) AS x
 ORDER BY w.want;
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
), d AS (
  UPDATE ledger_accounts AS acc
     SET debits_posted = :ndd::bigint, credits_posted = :dc::bigint, sequence = :nds::bigint, last_entry_at = t.created_at
    FROM t
   WHERE acc.tenant = 'bench' AND acc.id = 'acc-' || :a
), c AS (
  UPDATE ledger_accounts AS acc
     SET debits_posted = :cd::bigint, credits_posted = :ncc::bigint, sequence = :ncs::bigint, last_entry_at = t.created_at
    FROM t
   WHERE acc.tenant = 'bench' AND acc.id = 'acc-' || :b
)
SELECT created_at FROM t;
COMMIT;
