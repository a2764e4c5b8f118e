-- idem:compatible-from 10
-- Webhooks to a tenant's own endpoints: see the Postgres migration of the
-- same number. Times are integer microseconds; 0 stands for none.
CREATE TABLE idem_webhook_endpoints (
    id              TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    url             TEXT    NOT NULL,
    description     TEXT    NOT NULL DEFAULT '',
    event_types     TEXT    NOT NULL DEFAULT '[]',
    enabled         INTEGER NOT NULL,
    secrets         TEXT    NOT NULL,
    rate_limit      INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    failing_since   INTEGER NOT NULL DEFAULT 0,
    disabled_at     INTEGER NOT NULL DEFAULT 0,
    disabled_reason TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE INDEX idem_webhook_endpoints_tenant ON idem_webhook_endpoints (tenant, id);

CREATE TABLE idem_webhook_deliveries (
    endpoint_id      TEXT    NOT NULL,
    event_id         TEXT    NOT NULL,
    tenant           TEXT    NOT NULL,
    type             TEXT    NOT NULL,
    payload          BLOB    NOT NULL,
    event_created_at INTEGER NOT NULL,
    state            TEXT    NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_at          INTEGER NOT NULL,
    owner            TEXT    NOT NULL DEFAULT '',
    last_status      INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT    NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (endpoint_id, event_id)
);
CREATE INDEX idem_webhook_deliveries_due ON idem_webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX idem_webhook_deliveries_endpoint_created ON idem_webhook_deliveries (endpoint_id, event_created_at);
CREATE INDEX idem_webhook_deliveries_finished ON idem_webhook_deliveries (updated_at) WHERE state <> 'pending';

CREATE TABLE idem_webhook_attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant      TEXT    NOT NULL,
    endpoint_id TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    status      INTEGER NOT NULL,
    latency_ms  INTEGER NOT NULL,
    response    TEXT    NOT NULL DEFAULT '',
    error       TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX idem_webhook_attempts_endpoint ON idem_webhook_attempts (endpoint_id, id);
CREATE INDEX idem_webhook_attempts_at ON idem_webhook_attempts (at);
