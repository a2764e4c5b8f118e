-- The keeper's records: one row per (tenant, operation, client key). The
-- primary key is the unique constraint that decides which of two concurrent
-- copies does the work. A row becomes visible only when the transaction that
-- claimed it commits, and by then it holds the outcome.
CREATE TABLE idem_keys (
    scope       text        NOT NULL,
    operation   text        NOT NULL,
    key         text        NOT NULL,
    fingerprint bytea       NOT NULL,
    status      integer     NOT NULL DEFAULT 0,
    header      bytea,
    body        bytea,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, operation, key)
);

CREATE INDEX idem_keys_expires_at ON idem_keys (expires_at);
