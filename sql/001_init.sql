-- 001_init.sql — schema crier: the event outbox, notifications with their unique
-- idempotency key, webhook deliveries, and crier.emit() for callers' own transactions.

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

-- Wake the daemon once per inserting statement.
CREATE FUNCTION crier.notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crier_events', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_notify AFTER INSERT ON crier.events
    FOR EACH STATEMENT EXECUTE FUNCTION crier.notify_events();

-- The default dedupe key of an event: its natural key, with ':' and '\' inside
-- components escaped so that no two different (type, entity) pairs share it.
CREATE FUNCTION crier.natural_key(p_event_type text, p_entity_id text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT replace(replace(p_event_type, '\', '\\'), ':', '\:') || ':' ||
           replace(replace(p_entity_id, '\', '\\'), ':', '\:')
$$;

-- crier.emit: the transactional outbox. Call it inside your own transaction,
-- beside your business row. Returns the event's id, the same id when an event
-- with this (tenant, dedupe key) exists already. Without a dedupe key the
-- event's natural key (type, entity) is used.
CREATE FUNCTION crier.emit(p_tenant text, p_event_type text, p_entity_id text,
                           p_payload jsonb DEFAULT '{}'::jsonb,
                           p_dedupe_key text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id  bigint;
    v_key text;
BEGIN
    IF p_tenant IS NULL OR p_tenant = '' OR length(p_tenant) > 200 THEN
        RAISE EXCEPTION 'crier.emit: tenant must be a non-empty string of at most 200 characters'
            USING ERRCODE = '22023';
    END IF;
    IF p_event_type IS NULL OR p_event_type !~ '^[A-Za-z0-9_.-]{1,200}$' THEN
        RAISE EXCEPTION 'crier.emit: event type % is invalid: use 1-200 letters, digits, ".", "_" or "-"',
            coalesce(quote_literal(p_event_type), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_entity_id IS NULL OR p_entity_id = '' OR length(p_entity_id) > 500 THEN
        RAISE EXCEPTION 'crier.emit: entity id must be a non-empty string of at most 500 characters'
            USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'crier.emit: payload must be a JSON object'
            USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_payload::text) > 262144 THEN
        RAISE EXCEPTION 'crier.emit: payload is % bytes; the limit is 262144', octet_length(p_payload::text)
            USING ERRCODE = '54000';
    END IF;
    IF p_dedupe_key IS NOT NULL AND (p_dedupe_key = '' OR length(p_dedupe_key) > 500) THEN
        RAISE EXCEPTION 'crier.emit: dedupe key must be NULL or a non-empty string of at most 500 characters'
            USING ERRCODE = '22023';
    END IF;

    v_key := coalesce(p_dedupe_key, crier.natural_key(p_event_type, p_entity_id));
    LOOP
        INSERT INTO crier.events (tenant, event_type, entity_id, payload, dedupe_key)
        VALUES (p_tenant, p_event_type, p_entity_id, p_payload, v_key)
        ON CONFLICT (tenant, dedupe_key) DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
        SELECT id INTO v_id FROM crier.events WHERE tenant = p_tenant AND dedupe_key = v_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
        -- The conflicting row was deleted between the two statements: try again.
    END LOOP;
END;
$$;
