-- 001_init.sql — schema crier: the event outbox, notifications with their unique
-- idempotency key, and webhook deliveries. crier.emit() for callers' own
-- transactions, and the trigger that wakes the daemon, are in sql/functions/
-- (emit.sql, natural_key.sql, notify_events.sql).

CREATE SCHEMA IF NOT EXISTS crier;

-- The outbox. One row per accepted event; (tenant, dedupe_key) makes a retried
-- emit the same event.
CREATE TABLE crier.events (
    id            bigserial PRIMARY KEY,
    tenant        text        NOT NULL CHECK (tenant <> ''),
    event_type    text        NOT NULL CHECK (event_type <> ''),
    entity_id     text        NOT NULL CHECK (entity_id <> ''),
    payload       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    dedupe_key    text        NOT NULL,
    -- pending: waits for fan-out; done: fanned out; dead: quarantined with last_error.
    state         text        NOT NULL DEFAULT 'pending'
                              CHECK (state IN ('pending', 'done', 'dead')),
    attempts      integer     NOT NULL DEFAULT 0,
    available_at  timestamptz NOT NULL DEFAULT now(),
    last_error    text,
    rules_version text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    processed_at  timestamptz,
    UNIQUE (tenant, dedupe_key)
);
CREATE INDEX events_pending ON crier.events (id) WHERE state = 'pending';

-- One row per (tenant, event type, entity, recipient, discriminator): key_hash is
-- the first 128 bits of SHA-256 over that tuple (computed by the engine, see
-- src/keys.h); its uniqueness is what makes a retry never reach a person twice.
CREATE TABLE crier.notifications (
    id            bigserial PRIMARY KEY,
    key_hash      uuid        NOT NULL,
    key           text        NOT NULL,
    tenant        text        NOT NULL,
    event_id      bigint      NOT NULL REFERENCES crier.events (id),
    event_type    text        NOT NULL,
    entity_id     text        NOT NULL,
    recipient_id  text        NOT NULL,
    discriminator text,
    rules_version text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT notifications_key_hash_key UNIQUE (key_hash)
);
CREATE INDEX notifications_event ON crier.notifications (event_id);
CREATE INDEX notifications_recipient ON crier.notifications (tenant, recipient_id, id);

-- One row per notification and channel. due_at is when the row next needs work:
-- its next attempt while pending, the end of its lease while sending.
CREATE TABLE crier.deliveries (
    id              bigserial PRIMARY KEY,
    notification_id bigint      NOT NULL REFERENCES crier.notifications (id),
    tenant          text        NOT NULL,
    channel         text        NOT NULL,
    message_id      text        NOT NULL,
    target          text,
    body            text        NOT NULL,
    secret          text,
    -- pending: waits for an attempt; sending: claimed under a lease;
    -- delivered / dead: terminal.
    state           text        NOT NULL DEFAULT 'pending'
                                CHECK (state IN ('pending', 'sending', 'delivered', 'dead')),
    attempts        integer     NOT NULL DEFAULT 0,
    due_at          timestamptz NOT NULL DEFAULT now(),
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    UNIQUE (notification_id, channel)
);
CREATE INDEX deliveries_due ON crier.deliveries (due_at) WHERE state IN ('pending', 'sending');
