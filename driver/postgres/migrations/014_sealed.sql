-- idem:compatible-from 6
-- Encryption at rest (package seal, docs/operations.md "What idem keeps"):
-- sealed marks a row whose stored answer (idem_keys: header and body, in
-- body), whose message (idem_outbox: headers and payload, in payload) or
-- whose delivery's copy of it (idem_webhook_deliveries: payload) is a
-- ciphertext. A row says so itself, so that rows written before
-- encryption was turned on stay readable beside sealed ones, and a process
-- without the keys refuses a sealed row instead of answering ciphertext.
-- Older binaries never name the column and write plaintext rows (false);
-- turn encryption on only once every process runs a binary that reads it.
-- A constant default is a catalog change: no row is rewritten.
LOCK TABLE idem_keys, idem_outbox, idem_webhook_deliveries IN ACCESS EXCLUSIVE MODE;

ALTER TABLE idem_keys ADD COLUMN sealed boolean NOT NULL DEFAULT false;
ALTER TABLE idem_outbox ADD COLUMN sealed boolean NOT NULL DEFAULT false;
ALTER TABLE idem_webhook_deliveries ADD COLUMN sealed boolean NOT NULL DEFAULT false;
