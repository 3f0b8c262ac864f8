-- 006_api.sql — what the HTTP API of crier serve needs: a secret per tenant
-- (it signs the tenant's user tokens and cursors), API keys stored as SHA-256
-- digests, the idempotency records of POST /v1/events. The tenant-scoped
-- functions behind the endpoints (sql/functions/api_*.sql: request bodies
-- parsed by PostgreSQL, dead letters listed and replayed, a notification's and
-- an event's status, health and metrics) each take the tenant and refuse NULL:
-- the API never asks for "all tenants".

-- One row per tenant that uses the API. The secret never leaves the database
-- except to crier processes (crier serve, crier token); rotating it
-- (crier keys rotate-secret) invalidates every user token and cursor of the
-- tenant at once.
CREATE TABLE crier.api_tenants (
    tenant     text        PRIMARY KEY CHECK (tenant <> '' AND length(tenant) <= 200),
    -- DEFAULT crier.api_random_secret(), set by sql/functions/api_random_secret.sql
    secret     bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    rotated_at timestamptz
);

-- API keys for servers: the key itself ("crk_" + 43 base64url characters) is
-- shown once by crier keys create; only its SHA-256 is kept, looked up by
-- index. A revoked key stays listed (revoked_at) and is refused.
CREATE TABLE crier.api_keys (
    id         bigserial   PRIMARY KEY,
    tenant     text        NOT NULL REFERENCES crier.api_tenants (tenant),
    name       text,
    key_hash   bytea       NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    hint       text        NOT NULL, -- the key's first characters, to recognise it in lists
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX api_keys_tenant ON crier.api_keys (tenant, id);

-- POST /v1/events with an Idempotency-Key header: the first request's body
-- digest and response, written in the same transaction as crier.emit. The
-- same key with the same body replays the response; with another body it is
-- refused. Records older than a day are purged and the key can be used again.
CREATE TABLE crier.api_idempotency (
    tenant       text        NOT NULL,
    key          text        NOT NULL,
    request_hash bytea       NOT NULL, -- SHA-256 of the body as canonical jsonb text
    status       integer,
    response     text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, key)
);
CREATE INDEX api_idempotency_created ON crier.api_idempotency (created_at);

-- Quarantined events, for the dead-letter list and the metrics.
CREATE INDEX events_dead ON crier.events (tenant, processed_at) WHERE state = 'dead';
