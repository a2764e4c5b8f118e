-- Tables for the pgbench ceilings: idem's own schema (applied by `idem
-- migrate` before this), the business table the benchmark's work writes to,
-- and 1000 completed keys for the replay ceiling.
CREATE TABLE IF NOT EXISTS biz (k TEXT NOT NULL, note TEXT NOT NULL);
INSERT INTO idem_keys (scope, operation, key, fingerprint, status, body, created_at, expires_at)
SELECT 'tenant-a', 'POST /v1/things', 'replay-' || i, decode(repeat('ab', 32), 'hex'), 201,
       convert_to('{"id":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"posted","amount":1250,"currency":"EUR"}', 'UTF8'),
       now(), now() + interval '24 hours'
  FROM generate_series(0, 999) AS i
ON CONFLICT DO NOTHING;

-- 1000 accounts for the transfer ceiling, in a tenant of their own.
INSERT INTO ledger_accounts (tenant, id, currency, debits_must_not_exceed_credits,
                             credits_must_not_exceed_debits, created_at)
SELECT 'bench', 'acc-' || i, 'EUR', false, false, clock_timestamp()
  FROM generate_series(1, 1000) AS i
ON CONFLICT DO NOTHING;
