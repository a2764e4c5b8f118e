-- POST /v1/transfers as plain SQL: the same statements, in the same order,
-- that idem serve runs for a first arrival (driver/postgres keeper.go and
-- ledger.go): claim the key, lock the transfer id and the two accounts,
-- look for the id, append the transfer with its two entries and move the
-- accounts' totals, write the transfer.created event to the outbox, store
-- the answer, commit.
\set k random(1, 9000000000000000)
\set a random(1, 500)
\set b random(501, 1000)
BEGIN;
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
SELECT 'bench'::text, 'POST /v1/transfers'::text, ('pgb-' || :k)::text, decode(repeat('ab', 32), 'hex')::bytea, now()::timestamptz, (now() + interval '24 hours')::timestamptz
 WHERE NOT EXISTS (SELECT 1 FROM idem_tombstones
                    WHERE scope = 'bench' AND id = idem_tombstone_id('bench', 'POST /v1/transfers', ('pgb-' || :k)) AND created_at > (now() - interval '30 days'))
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = EXCLUDED.fingerprint, status = 0, header = NULL, body = NULL, sealed = false,
       created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
 WHERE idem_keys.created_at <= (now() - interval '30 days')
RETURNING idem_claimable(scope, operation, key, (now() - interval '30 days'));
SELECT count(pg_advisory_xact_lock(hashtextextended('idem.ledger.transfer/bench/pgb-' || :k, 0)));
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
SELECT x.id FROM (SELECT DISTINCT unnest(ARRAY['pgb-' || :k]) AS want ORDER BY want) AS w
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
  SELECT 'bench', 'pgb-' || :k, 'acc-' || :a, 'acc-' || :b, 100, 'EUR', clock.at FROM clock
  RETURNING created_at
), e AS (
  INSERT INTO ledger_entries (tenant, account_id, sequence, transfer_id, amount, credit, debits_posted, credits_posted, created_at)
  SELECT 'bench', 'acc-' || :a, :nds::bigint, 'pgb-' || :k, 100, false, :ndd::bigint, :dc::bigint, t.created_at FROM t
  UNION ALL
  SELECT 'bench', 'acc-' || :b, :ncs::bigint, 'pgb-' || :k, 100, true, :cd::bigint, :ncc::bigint, t.created_at FROM t
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
INSERT INTO idem_outbox (id, tenant, type, okey, shard, payload, headers, created_at)
SELECT * FROM unnest(ARRAY[gen_random_uuid()], ARRAY['bench'], ARRAY['transfer.created'], ARRAY['transfer/pgb-' || :k],
                     ARRAY[(:k::bigint % 64)::integer], ARRAY[convert_to(repeat('x', 180), 'UTF8')], ARRAY[NULL::bytea], ARRAY[now()]);
WITH r AS (
  UPDATE idem_keys SET status = 201, header = convert_to('{"Content-Type":["application/json"],"Location":["/v1/transfers/x"]}', 'UTF8'), body = convert_to(repeat('x', 280), 'UTF8'), sealed = false
   WHERE scope = 'bench' AND operation = 'POST /v1/transfers' AND key = ('pgb-' || :k)
  RETURNING 1)
SELECT idem_expect((SELECT count(*) FROM r), 1, 'record outcome');
COMMIT;
