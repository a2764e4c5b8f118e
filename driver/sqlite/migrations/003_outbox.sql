-- The transactional outbox: see the Postgres migration of the same number.
-- SQLite serializes writers, so a row's rowid order is its commit order:
-- pos is the rowid, given at insert (AUTOINCREMENT: never reused, even after
-- retention deletes the newest rows). Times are integer microseconds.
CREATE TABLE idem_outbox (
    pos         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT    NOT NULL UNIQUE,
    tenant      TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    okey        TEXT    NOT NULL,
    shard       INTEGER NOT NULL,
    payload     BLOB    NOT NULL,
    headers     BLOB,
    created_at  INTEGER NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT,
    sent_at     INTEGER,
    dead_at     INTEGER
);

CREATE INDEX idem_outbox_pending ON idem_outbox (pos) WHERE sent_at IS NULL AND dead_at IS NULL;
CREATE INDEX idem_outbox_tenant_pos ON idem_outbox (tenant, pos);
CREATE INDEX idem_outbox_sent_at ON idem_outbox (sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX idem_outbox_dead ON idem_outbox (pos) WHERE dead_at IS NOT NULL;

CREATE TABLE idem_outbox_holds (
    tenant  TEXT    NOT NULL,
    okey    TEXT    NOT NULL,
    until   INTEGER NOT NULL,
    dead    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, okey)
) WITHOUT ROWID;

CREATE TABLE idem_outbox_shards (
    shard       INTEGER PRIMARY KEY,
    owner       TEXT    NOT NULL DEFAULT '',
    lease_until INTEGER NOT NULL DEFAULT 0
);
WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 63)
INSERT INTO idem_outbox_shards (shard) SELECT n FROM s;

CREATE TABLE idem_outbox_relays (
    owner      TEXT    PRIMARY KEY,
    seen_until INTEGER NOT NULL
) WITHOUT ROWID;
