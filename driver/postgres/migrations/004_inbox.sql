-- Consumer-side deduplication: one row per (consumer, message id), written
-- in the consumer's own transaction with its effects. The primary key is the
-- unique constraint that makes a redelivered message a no-op.
CREATE TABLE idem_inbox (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL,
    PRIMARY KEY (consumer, message_id)
);

CREATE INDEX idem_inbox_processed_at ON idem_inbox (processed_at);
