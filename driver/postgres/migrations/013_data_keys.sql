-- idem:compatible-from 6
-- The tenants' data keys (package seal, docs/operations.md "Encryption at
-- rest"). A new table: older binaries never name it.
--
-- One row per version of a tenant's data key. The key is stored only
-- wrapped by a master key, named by master_key_id (the key file's name or
-- a KMS key's id). The primary key decides a race between two processes
-- creating the same version: the loser reads the winner's key. Forgetting
-- a tenant overwrites wrapped and master_key_id with empty values and sets
-- forgotten_at; the row stays, so every process learns that what was
-- sealed under that version is gone rather than finding no key.
CREATE TABLE idem_data_keys (
    tenant        text        NOT NULL,
    version       integer     NOT NULL CHECK (version > 0),
    master_key_id text        NOT NULL,
    wrapped       bytea       NOT NULL,
    forgotten_at  timestamptz,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, version)
);
