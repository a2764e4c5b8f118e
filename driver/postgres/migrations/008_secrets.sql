-- idem:compatible-from 6
-- Secrets the service generates once and every process shares: the key
-- that seals GET /v1/events cursors, so that a cursor says nothing of the
-- outbox positions other tenants' events take (docs/api.md, Events). A
-- new table: binaries of migration 6 or later never name it.
CREATE TABLE idem_secrets (
  name  text PRIMARY KEY,
  value bytea NOT NULL
);
