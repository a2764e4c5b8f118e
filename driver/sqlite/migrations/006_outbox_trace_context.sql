-- idem:compatible-from 5
-- The W3C trace context of the span that enqueued a message: see the
-- Postgres migration of the same number. NULL when the request was not
-- traced; a binary of migration 5 does not name the columns.
ALTER TABLE idem_outbox ADD COLUMN traceparent TEXT;
ALTER TABLE idem_outbox ADD COLUMN tracestate TEXT;
