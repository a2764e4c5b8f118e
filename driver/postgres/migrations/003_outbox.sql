-- The transactional outbox. A row is written in the caller's transaction
-- (so it exists if and only if the business change committed) and published
-- later by a relay.
--
-- pos is the commit position. A transaction's rows cannot know it at insert
-- (ids are assigned before commit, and transactions commit out of id order),
-- so a relay gives positions to committed rows from idem_outbox_pos_seq,
-- one sequencer at a time (under an advisory lock): a row that commits late
-- gets a later position than every row already sequenced, so a reader that
-- follows positions never skips it.
CREATE SEQUENCE idem_outbox_pos_seq;

CREATE TABLE idem_outbox (
    id          uuid        PRIMARY KEY,
    tenant      text        NOT NULL,
    type        text        NOT NULL,
    okey        text        NOT NULL,
    shard       integer     NOT NULL,
    payload     bytea       NOT NULL,
    headers     bytea,
    created_at  timestamptz NOT NULL,
    pos         bigint      UNIQUE,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text,
    sent_at     timestamptz,
    dead_at     timestamptz
);

-- Rows awaiting a position, oldest id first.
CREATE INDEX idem_outbox_unsequenced ON idem_outbox (id) WHERE pos IS NULL;
-- The relay's work: live unsent rows in position order.
CREATE INDEX idem_outbox_pending ON idem_outbox (pos)
    WHERE sent_at IS NULL AND dead_at IS NULL AND pos IS NOT NULL;
-- GET /v1/events: a tenant's rows in position order.
CREATE INDEX idem_outbox_tenant_pos ON idem_outbox (tenant, pos) WHERE pos IS NOT NULL;
-- Retention of published rows.
CREATE INDEX idem_outbox_sent_at ON idem_outbox (sent_at) WHERE sent_at IS NOT NULL;
-- Dead letters, for operators.
CREATE INDEX idem_outbox_dead ON idem_outbox (pos) WHERE dead_at IS NOT NULL;

-- A held ordering key publishes nothing: until a time after a failed attempt
-- (backoff), or for good while it has a dead letter. Holds are few: only
-- keys that failed.
CREATE TABLE idem_outbox_holds (
    tenant  text        NOT NULL,
    okey    text        NOT NULL,
    until   timestamptz NOT NULL,
    dead    boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, okey)
);

-- Shard leases: a relay publishes only the rows of shards it leases, so one
-- relay at a time publishes a key's rows, in order.
CREATE TABLE idem_outbox_shards (
    shard       integer     PRIMARY KEY,
    owner       text        NOT NULL DEFAULT '',
    lease_until timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO idem_outbox_shards (shard) SELECT generate_series(0, 63);

-- Live relays, so each can take its fair share of the shards.
CREATE TABLE idem_outbox_relays (
    owner      text        PRIMARY KEY,
    seen_until timestamptz NOT NULL
);
