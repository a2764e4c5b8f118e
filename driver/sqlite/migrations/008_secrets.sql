-- idem:compatible-from 6
-- Secrets the service generates once and every process shares: see the
-- Postgres migration of the same number.
CREATE TABLE idem_secrets (
  name  TEXT PRIMARY KEY,
  value BLOB NOT NULL
);
