-- The keeper's records: see the Postgres migration of the same number.
-- Times are integer microseconds since the Unix epoch (UTC).
CREATE TABLE idem_keys (
    scope       TEXT    NOT NULL,
    operation   TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    fingerprint BLOB    NOT NULL,
    status      INTEGER NOT NULL DEFAULT 0,
    header      BLOB,
    body        BLOB,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, operation, key)
) WITHOUT ROWID;

CREATE INDEX idem_keys_expires_at ON idem_keys (expires_at);
