-- 013_timers.sql — time in rules, part 1: durable timers, digests, throttles and delays
-- (lua/crier/timing.lua says what a rule writes; sql/functions/apply_timing.sql,
-- release_delivery.sql, digest_join.sql, fire_timers.sql and flush_digests.sql what the
-- engine does with it).

-- Durable timers: one row per thing that must happen at a time. key is deterministic
-- (crier.timer_key over what the timer is for), so a timer is created once however often
-- its cause is replayed; a firing claims it FOR UPDATE SKIP LOCKED, does its effect and
-- marks it fired in the same transaction, so a crash fires it again later and a second
-- worker never fires it twice.
CREATE TABLE crier.timers (
    id          bigserial   PRIMARY KEY,
    key         uuid        NOT NULL UNIQUE,
    tenant      text        NOT NULL,
    -- delay: a held delivery is decided (sent, or cancelled by its conditions);
    -- digest: a digest window closes and its message is rendered and queued.
    kind        text        NOT NULL CHECK (kind IN ('delay', 'digest')),
    due_at      timestamptz NOT NULL,
    state       text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'fired', 'dead')),
    delivery_id bigint,     -- kind delay
    digest_id   bigint,     -- kind digest
    attempts    integer     NOT NULL DEFAULT 0,
    outcome     text,       -- what firing did (or the last error while it could not)
    created_at  timestamptz NOT NULL DEFAULT now(),
    fired_at    timestamptz
);
CREATE INDEX timers_due ON crier.timers (due_at) WHERE state = 'pending';
CREATE INDEX timers_delivery ON crier.timers (delivery_id) WHERE delivery_id IS NOT NULL;
CREATE INDEX timers_digest ON crier.timers (digest_id) WHERE digest_id IS NOT NULL;

-- Digest windows: one row per (tenant, recipient, channel, digest key, window). At most
-- one is open per (tenant, recipient, channel, key) — the unique index digests_open —
-- and items join it under its row lock; the window's timer flushes it: one notification
-- (whose key is derived from the window) with one delivery, every item's delivery
-- pointing at the digest. An item that meets a window being flushed waits for the flush
-- to commit and opens the next window.
CREATE TABLE crier.digests (
    id              bigserial   PRIMARY KEY,
    tenant          text        NOT NULL,
    recipient_id    text        NOT NULL,
    channel         text        NOT NULL,
    digest_key      text        NOT NULL,
    event_type      text        NOT NULL, -- the rule whose digest block renders it (the first item's)
    window_start    timestamptz NOT NULL,
    window_end      timestamptz NOT NULL,
    max_items       integer,
    items           integer     NOT NULL DEFAULT 0,
    -- open: items join; closed: no more items (max_items reached, or an item came after
    -- window_end while the flush had not run yet), its timer due; sent: flushed
    state           text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'closed', 'sent')),
    notification_id bigint,     -- the digest's own notification, once sent
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    UNIQUE (tenant, recipient_id, channel, digest_key, window_start)
);
CREATE UNIQUE INDEX digests_open ON crier.digests (tenant, recipient_id, channel, digest_key)
    WHERE state = 'open';

-- Throttle: the sends counted per throttle key (a hash of tenant, recipient, channel and
-- the rule's throttle key) in the last period; rows older than the period are deleted
-- when the key is next used.
CREATE TABLE crier.throttle_hits (
    key         uuid        NOT NULL,
    at          timestamptz NOT NULL,
    delivery_id bigint      NOT NULL
);
CREATE INDEX throttle_hits_key ON crier.throttle_hits (key, at);

-- Deliveries: the timing a rule gave (lua/crier/timing.lua's JSON), the digest an item
-- joined, and three states: timing (inserted by a fan-out batch and decided before it
-- commits), held (a delay runs: due_at is when it ends), digested (sent as part of the
-- digest digest_id: terminal for the item).
ALTER TABLE crier.deliveries
    ADD COLUMN timing jsonb,
    ADD COLUMN digest_id bigint REFERENCES crier.digests (id);
ALTER TABLE crier.deliveries DROP CONSTRAINT deliveries_state_check;
ALTER TABLE crier.deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'sending', 'paused', 'delivered', 'dead', 'suppressed', 'timing', 'held',
                     'digested'));
CREATE INDEX deliveries_timing ON crier.deliveries (id) WHERE state = 'timing';
CREATE INDEX deliveries_digest ON crier.deliveries (digest_id) WHERE digest_id IS NOT NULL;

-- cancel_on: a delayed delivery looks for events of the cancelling types on its entity.
CREATE INDEX events_entity ON crier.events (tenant, entity_id, event_type);
