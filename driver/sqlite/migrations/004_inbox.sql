-- Consumer-side deduplication: see the Postgres migration of the same
-- number. Times are integer microseconds.
CREATE TABLE idem_inbox (
    consumer     TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID;

CREATE INDEX idem_inbox_processed_at ON idem_inbox (processed_at);
