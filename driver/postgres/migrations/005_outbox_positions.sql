-- Positions without a second write. Migration 003 gave committed rows
-- their position in an UPDATE of their own (the relay's sequencer), so a
-- published message cost two rewrites of its row: every update writes a
-- new version of the whole row into the heap and every index, which was
-- most of what publishing cost the database. Now a row is written once at
-- insert and once when marked sent:
--
-- * GET /v1/events lists in (txid, pos) order: txid is the inserting
--   transaction's id, pos a sequence value drawn at insert. A reader lists
--   only rows whose txid is below its snapshot's xmin (every transaction
--   with a smaller id has ended), so a row can never appear behind a cursor
--   that has passed it (docs/outbox.md).
-- * The relay reads unsent rows in id order, and finds the few that commit
--   behind its reads by txid (idem_outbox_pending_tx): it needs no
--   position.
ALTER TABLE idem_outbox ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();
-- Rows a relay had not sequenced yet get their position now, in id order.
UPDATE idem_outbox o SET pos = s.pos
  FROM (SELECT id, nextval('idem_outbox_pos_seq') AS pos
          FROM unnest(ARRAY(SELECT id FROM idem_outbox WHERE pos IS NULL ORDER BY id)) AS t(id)) s
 WHERE o.id = s.id;
ALTER TABLE idem_outbox ALTER COLUMN pos SET DEFAULT nextval('idem_outbox_pos_seq');
ALTER TABLE idem_outbox ALTER COLUMN pos SET NOT NULL;
-- Positions come from the sequence: distinct without a unique index, which
-- would cost an index write on every update.
ALTER TABLE idem_outbox DROP CONSTRAINT idem_outbox_pos_key;

DROP INDEX idem_outbox_unsequenced;
DROP INDEX idem_outbox_pending;
DROP INDEX idem_outbox_tenant_pos;
-- The relay's work: live unsent rows, oldest id first.
CREATE INDEX idem_outbox_pending ON idem_outbox (id) WHERE sent_at IS NULL AND dead_at IS NULL;
-- The same rows by transaction, for the few that commit behind a relay's
-- reads (its cycle's horizon): an index written at insert only.
CREATE INDEX idem_outbox_pending_tx ON idem_outbox (txid) WHERE sent_at IS NULL AND dead_at IS NULL;
-- GET /v1/events: a tenant's rows in list order.
CREATE INDEX idem_outbox_tenant_list ON idem_outbox (tenant, txid, pos);
-- Retention finds published rows by sent_at. A block-range index costs a
-- mark next to nothing where a B-tree costs an index entry per row, and
-- rows are marked, so written, roughly in sent_at order.
DROP INDEX idem_outbox_sent_at;
CREATE INDEX idem_outbox_sent_at ON idem_outbox USING brin (sent_at) WITH (autosummarize = on);
