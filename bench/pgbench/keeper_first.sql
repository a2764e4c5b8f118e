-- The keeper's first arrival as plain SQL: claim, one business row, store
-- the outcome, commit. Same statements and round trips as idem.Keeper.Do.
\set k random(1, 9000000000000000)
BEGIN;
INSERT INTO idem_keys (scope, operation, key, fingerprint, created_at, expires_at)
VALUES ('tenant-a', 'POST /v1/things', 'pgb-' || :k, decode(repeat('ab', 32), 'hex'), now(), now() + interval '24 hours')
ON CONFLICT (scope, operation, key) DO UPDATE
   SET fingerprint = EXCLUDED.fingerprint, status = 0, header = NULL, body = NULL,
       created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
 WHERE idem_keys.expires_at <= EXCLUDED.created_at
RETURNING true;
INSERT INTO biz (k, note) VALUES ('bench', 'one side effect');
WITH r AS (
  UPDATE idem_keys SET status = 201, header = NULL,
         body = convert_to('{"id":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","status":"posted","amount":1250,"currency":"EUR"}', 'UTF8')
   WHERE scope = 'tenant-a' AND operation = 'POST /v1/things' AND key = 'pgb-' || :k
  RETURNING 1)
SELECT idem_expect((SELECT count(*) FROM r), 1, 'record outcome');
COMMIT;
