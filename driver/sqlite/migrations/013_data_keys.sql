-- idem:compatible-from 10
-- The tenants' data keys: see the Postgres migration of the same number.
-- Times are integer microseconds; forgotten_at 0 stands for none.
CREATE TABLE idem_data_keys (
    tenant        TEXT    NOT NULL,
    version       INTEGER NOT NULL CHECK (version > 0),
    master_key_id TEXT    NOT NULL,
    wrapped       BLOB    NOT NULL,
    forgotten_at  INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant, version)
) WITHOUT ROWID;
