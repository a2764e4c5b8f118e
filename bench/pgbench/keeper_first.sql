-- The keeper's first arrival as plain SQL: claim, one business row, store
-- the outcome, commit. Same statements and round trips as idem.Keeper.Do.
\set k random(1, 9000000000000000)
BEGIN;
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
SELECT 'tenant-a'::text, 'POST /v1/things'::text, ('pgb-' || :k)::text, decode(repeat('ab', 32), 'hex')::bytea, now()::timestamptz, (now() + interval '24 hours')::timestamptz
 WHERE NOT EXISTS (SELECT 1 FROM idem_tombstones
                    WHERE scope = 'tenant-a' AND id = idem_tombstone_id('tenant-a', 'POST /v1/things', ('pgb-' || :k)) AND created_at > (now() - interval '30 days'))
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = EXCLUDED.fingerprint, status = 0, header = NULL, body = NULL, sealed = false,
       created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
 WHERE idem_keys.created_at <= (now() - interval '30 days')
RETURNING idem_claimable(scope, operation, key, (now() - interval '30 days'));
INSERT INTO biz (k, note) VALUES ('bench', 'one side effect');
WITH r AS (
  UPDATE idem_keys SET status = 201, header = NULL, body = convert_to('{"id":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"posted","amount":1250,"currency":"EUR"}', 'UTF8'), sealed = false
   WHERE scope = 'tenant-a' AND operation = 'POST /v1/things' AND key = ('pgb-' || :k)
  RETURNING 1)
SELECT idem_expect((SELECT count(*) FROM r), 1, 'record outcome');
COMMIT;
