-- idem:compatible-from 10
-- Encryption at rest: see the Postgres migration of the same number. 0 is
-- a plaintext row, 1 a sealed one.
ALTER TABLE idem_keys ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idem_outbox ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idem_webhook_deliveries ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
