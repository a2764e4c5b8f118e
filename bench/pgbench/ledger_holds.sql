-- ledger.BenchmarkHolds as plain SQL: a hold of 100 reserved in one
-- transaction and 60 of it posted in a second, with the statements
-- driver/postgres/ledger.go runs for each (lock the id and the accounts,
-- which the post finds by its hold in the statement that locks them; look
-- for the transfers with what settled them, append the transfer and its
-- entries, move the posted and pending totals, add or remove the open
-- hold). One script, two transactions: its tps is holds/s.
\set k random(1, 9000000000000000)
\set a random(1, 500)
\set b random(501, 1000)
BEGIN;
SELECT count(pg_advisory_xact_lock(hashtextextended('idem.ledger.transfer/bench/lh-' || :k, 0)));
SELECT max(debits_posted)   FILTER (WHERE id = 'acc-' || :a) AS dd,
       max(debits_pending)  FILTER (WHERE id = 'acc-' || :a) AS ddp,
       max(credits_posted)  FILTER (WHERE id = 'acc-' || :a) AS dc,
       max(credits_pending) FILTER (WHERE id = 'acc-' || :a) AS dcp,
       max(sequence)        FILTER (WHERE id = 'acc-' || :a) AS ds,
       max(debits_posted)   FILTER (WHERE id = 'acc-' || :b) AS cd,
       max(debits_pending)  FILTER (WHERE id = 'acc-' || :b) AS cdp,
       max(credits_posted)  FILTER (WHERE id = 'acc-' || :b) AS cc,
       max(credits_pending) FILTER (WHERE id = 'acc-' || :b) AS ccp,
       max(sequence)        FILTER (WHERE id = 'acc-' || :b) AS cs
  FROM (SELECT x.* FROM (SELECT DISTINCT unnest(ARRAY['acc-' || :a, 'acc-' || :b]) AS want ORDER BY want) AS w
         CROSS JOIN LATERAL (SELECT * FROM ledger_accounts x WHERE x.tenant = 'bench' AND x.id = w.want LIMIT 1 FOR UPDATE) AS x
         ORDER BY w.want) AS locked
\gset
SELECT x.id, coalesce((SELECT s.id FROM ledger_transfers s WHERE x.pending AND s.tenant = x.tenant AND s.pending_id = x.id), '')
  FROM (SELECT DISTINCT unnest(ARRAY['lh-' || :k]) AS want ORDER BY want) AS w
 CROSS JOIN LATERAL (SELECT * FROM ledger_transfers x WHERE x.tenant = 'bench' AND x.id = w.want LIMIT 1) AS x
 ORDER BY w.want;
\set nds :ds + 1
\set nddp :ddp + 100
\set ncs :cs + 1
\set nccp :ccp + 100
WITH clock AS (
  SELECT clock_timestamp() AS at
), t AS (
  INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at,
                                pending, timeout_seconds, expires_at)
  SELECT 'bench', 'lh-' || :k, 'acc-' || :a, 'acc-' || :b, 100, 'EUR', clock.at, true, 3600, clock.at + interval '1 hour' FROM clock
  RETURNING created_at, expires_at
), e AS (
  INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at,
                              pending_change, pending_only, debits_pending, credits_pending)
  SELECT 'bench', 'acc-' || :a, :nds::bigint, 'lh-' || :k, 100, false, :dd::bigint, :dc::bigint, t.created_at, 100, true, :nddp::bigint, :dcp::bigint FROM t
  UNION ALL
  SELECT 'bench', 'acc-' || :b, :ncs::bigint, 'lh-' || :k, 100, true, :cd::bigint, :cc::bigint, t.created_at, 100, true, :cdp::bigint, :nccp::bigint FROM t
), d AS (
  UPDATE ledger_accounts AS acc SET debits_pending = :nddp::bigint, sequence = :nds::bigint, last_entry_at = t.created_at
    FROM t WHERE acc.tenant = 'bench' AND acc.id = 'acc-' || :a
), c AS (
  UPDATE ledger_accounts AS acc SET credits_pending = :nccp::bigint, sequence = :ncs::bigint, last_entry_at = t.created_at
    FROM t WHERE acc.tenant = 'bench' AND acc.id = 'acc-' || :b
)
INSERT INTO ledger_holds (tenant, transfer_id, debit_account_id, credit_account_id, amount, expires_at)
SELECT 'bench', 'lh-' || :k, 'acc-' || :a, 'acc-' || :b, 100, t.expires_at FROM t;
COMMIT;
BEGIN;
SELECT count(pg_advisory_xact_lock(hashtextextended('idem.ledger.transfer/bench/lh-' || :k || '-post', 0)));
SELECT max(debits_posted)   FILTER (WHERE id = 'acc-' || :a) AS dd,
       max(debits_pending)  FILTER (WHERE id = 'acc-' || :a) AS ddp,
       max(credits_posted)  FILTER (WHERE id = 'acc-' || :a) AS dc,
       max(credits_pending) FILTER (WHERE id = 'acc-' || :a) AS dcp,
       max(sequence)        FILTER (WHERE id = 'acc-' || :a) AS ds,
       max(debits_posted)   FILTER (WHERE id = 'acc-' || :b) AS cd,
       max(debits_pending)  FILTER (WHERE id = 'acc-' || :b) AS cdp,
       max(credits_posted)  FILTER (WHERE id = 'acc-' || :b) AS cc,
       max(credits_pending) FILTER (WHERE id = 'acc-' || :b) AS ccp,
       max(sequence)        FILTER (WHERE id = 'acc-' || :b) AS cs
  FROM (SELECT x.* FROM (SELECT DISTINCT want_tenant, want_id FROM (
                SELECT want_tenant, want_id FROM unnest(ARRAY[]::text[], ARRAY[]::text[]) AS u(want_tenant, want_id)
                UNION ALL
                SELECT t.tenant, a.id
                  FROM unnest(ARRAY['bench'], ARRAY['lh-' || :k]) AS o(tenant, id)
                 CROSS JOIN LATERAL (SELECT * FROM ledger_transfers t WHERE t.tenant = o.tenant AND t.id = o.id LIMIT 1) AS t
                 CROSS JOIN LATERAL (VALUES (t.debit_account_id), (t.credit_account_id)) AS a(id)) AS k
               ORDER BY want_tenant, want_id) AS w
         CROSS JOIN LATERAL (SELECT * FROM ledger_accounts x WHERE x.tenant = w.want_tenant AND x.id = w.want_id LIMIT 1 FOR UPDATE) AS x
         ORDER BY w.want_tenant, w.want_id) AS locked
\gset
SELECT x.id, coalesce((SELECT s.id FROM ledger_transfers s WHERE x.pending AND s.tenant = x.tenant AND s.pending_id = x.id), '')
  FROM (SELECT DISTINCT unnest(ARRAY['lh-' || :k, 'lh-' || :k || '-post']) AS want ORDER BY want) AS w
 CROSS JOIN LATERAL (SELECT * FROM ledger_transfers x WHERE x.tenant = 'bench' AND x.id = w.want LIMIT 1) AS x
 ORDER BY w.want;
\set nds :ds + 1
\set ndd :dd + 60
\set nddp :ddp - 100
\set ncs :cs + 1
\set ncc :cc + 60
\set nccp :ccp - 100
WITH clock AS (
  SELECT clock_timestamp() AS at
), t AS (
  INSERT INTO ledger_transfers (tenant, id, debit_account_id, credit_account_id, amount, currency, created_at, pending_id, settles)
  SELECT 'bench', 'lh-' || :k || '-post', 'acc-' || :a, 'acc-' || :b, 60, 'EUR', clock.at, 'lh-' || :k, 'post' FROM clock
  RETURNING created_at
), e AS (
  INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at,
                              pending_change, pending_only, debits_pending, credits_pending)
  SELECT 'bench', 'acc-' || :a, :nds::bigint, 'lh-' || :k || '-post', 60, false, :ndd::bigint, :dc::bigint, t.created_at, -100, false, :nddp::bigint, :dcp::bigint FROM t
  UNION ALL
  SELECT 'bench', 'acc-' || :b, :ncs::bigint, 'lh-' || :k || '-post', 60, true, :cd::bigint, :ncc::bigint, t.created_at, -100, false, :cdp::bigint, :nccp::bigint FROM t
), d AS (
  UPDATE ledger_accounts AS acc SET debits_posted = :ndd::bigint, debits_pending = :nddp::bigint, sequence = :nds::bigint, last_entry_at = t.created_at
    FROM t WHERE acc.tenant = 'bench' AND acc.id = 'acc-' || :a
), c AS (
  UPDATE ledger_accounts AS acc SET credits_posted = :ncc::bigint, credits_pending = :nccp::bigint, sequence = :ncs::bigint, last_entry_at = t.created_at
    FROM t WHERE acc.tenant = 'bench' AND acc.id = 'acc-' || :b
)
DELETE FROM ledger_holds h USING t WHERE h.tenant = 'bench' AND h.transfer_id = 'lh-' || :k;
COMMIT;
