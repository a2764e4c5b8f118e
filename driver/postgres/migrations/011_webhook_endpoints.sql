-- idem:compatible-from 6
-- Webhooks to a tenant's own endpoints (package outbox/webhookout). New
-- tables only: older binaries never name them.
--
-- An endpoint is a tenant's receiving URL with its filter and secrets.
-- event_types is a JSON array of type names and "prefix.*" patterns (empty:
-- every type); secrets is a JSON array of the signing secrets, the newest
-- first, each with the time it stops signing (none for the current one).
CREATE TABLE idem_webhook_endpoints (
    id              text        PRIMARY KEY,
    tenant          text        NOT NULL,
    url             text        NOT NULL,
    description     text        NOT NULL DEFAULT '',
    event_types     text        NOT NULL DEFAULT '[]',
    enabled         boolean     NOT NULL,
    secrets         text        NOT NULL,
    rate_limit      integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    failing_since   timestamptz,
    disabled_at     timestamptz,
    disabled_reason text        NOT NULL DEFAULT ''
);
-- A tenant's endpoints in id order (GET /v1/webhook-endpoints), and the
-- fan-out's read of the enabled endpoints of a batch's tenants.
CREATE INDEX idem_webhook_endpoints_tenant ON idem_webhook_endpoints (tenant, id);

-- One delivery per (event, endpoint): the primary key makes the fan-out,
-- which runs at least once per event, create it once. The event's type,
-- payload and time are copied: a delivery retried for days outlives the
-- outbox row's retention. A pending delivery is due at next_at; a worker
-- that claims one moves next_at to its lease's end and writes its name in
-- owner, so that no other worker takes it while the lease lasts.
CREATE TABLE idem_webhook_deliveries (
    endpoint_id      text        NOT NULL,
    event_id         text        NOT NULL,
    tenant           text        NOT NULL,
    type             text        NOT NULL,
    payload          bytea       NOT NULL,
    event_created_at timestamptz NOT NULL,
    state            text        NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    next_at          timestamptz NOT NULL,
    owner            text        NOT NULL DEFAULT '',
    last_status      integer     NOT NULL DEFAULT 0,
    last_error       text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, event_id)
);
-- The workers' claims: pending deliveries by due time.
CREATE INDEX idem_webhook_deliveries_due ON idem_webhook_deliveries (next_at) WHERE state = 'pending';
-- Replays since a time, and retention of finished deliveries.
CREATE INDEX idem_webhook_deliveries_endpoint_created ON idem_webhook_deliveries (endpoint_id, event_created_at);
CREATE INDEX idem_webhook_deliveries_finished ON idem_webhook_deliveries (updated_at) WHERE state <> 'pending';

-- Every attempt, for GET /v1/webhook-endpoints/{id}/attempts; retention
-- deletes them after a bounded age.
CREATE TABLE idem_webhook_attempts (
    id          bigserial   PRIMARY KEY,
    tenant      text        NOT NULL,
    endpoint_id text        NOT NULL,
    event_id    text        NOT NULL,
    attempt     integer     NOT NULL,
    at          timestamptz NOT NULL,
    status      integer     NOT NULL,
    latency_ms  bigint      NOT NULL,
    response    text        NOT NULL DEFAULT '',
    error       text        NOT NULL DEFAULT ''
);
CREATE INDEX idem_webhook_attempts_endpoint ON idem_webhook_attempts (endpoint_id, id);
CREATE INDEX idem_webhook_attempts_at ON idem_webhook_attempts (at);
