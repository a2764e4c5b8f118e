-- idem:compatible-from 10
-- Tombstones: see the Postgres migration of the same number. SQLite's one
-- writer at a time needs no idem_claimable: a claim never waits on the
-- janitor's move. The key is the id alone, without PostgreSQL's leading
-- tenant: a SQLite database is never distributed. A new table: older
-- binaries never name it.
CREATE TABLE idem_tombstones (
    id          BLOB    PRIMARY KEY,
    fingerprint BLOB    NOT NULL,
    status      INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX idem_tombstones_created_at ON idem_tombstones (created_at);
