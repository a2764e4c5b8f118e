-- The keeper's replay as plain SQL: one read of a completed record.
\set k random(0, 999)
SELECT fingerprint, status, header, body, sealed, created_at, expires_at
  FROM idem_keys WHERE scope = 'tenant-a' AND operation = 'POST /v1/things' AND key = 'replay-' || :k;
