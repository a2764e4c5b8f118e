-- idem:compatible-from 5
-- The W3C trace context (traceparent, tracestate) of the span that enqueued
-- a message, so that the relay publishes it as a child of the request that
-- caused it and the consumer continues that trace (docs/operations.md,
-- Tracing). NULL when the request was not traced, which is every row of a
-- service without OpenTelemetry configured. Nullable columns without a
-- default change no stored row and take no rewrite; a binary of migration 5
-- does not name them, so it keeps running on this schema (its rows carry no
-- trace context).
ALTER TABLE idem_outbox ADD COLUMN traceparent text;
ALTER TABLE idem_outbox ADD COLUMN tracestate text;
