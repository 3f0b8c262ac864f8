-- 006_api.sql — what the HTTP API of crier serve needs: a secret per tenant
-- (it signs the tenant's user tokens and cursors), API keys stored as SHA-256
-- digests, the idempotency records of POST /v1/events, and tenant-scoped
-- functions behind the endpoints: request bodies parsed by PostgreSQL, dead
-- letters listed and replayed, a notification's and an event's status, health
-- and metrics. Every function that reads tenant data takes the tenant and
-- refuses NULL: the API never asks for "all tenants".

-- 32 bytes from the server's strong random source (pg_strong_random behind
-- gen_random_uuid: two version-4 uuids, 244 random bits).
CREATE FUNCTION crier.api_random_secret() RETURNS bytea LANGUAGE sql VOLATILE AS $$
    SELECT decode(replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''), 'hex')
$$;

-- One row per tenant that uses the API. The secret never leaves the database
-- except to crier processes (crier serve, crier token); rotating it
-- (crier keys rotate-secret) invalidates every user token and cursor of the
-- tenant at once.
CREATE TABLE crier.api_tenants (
    tenant     text        PRIMARY KEY CHECK (tenant <> '' AND length(tenant) <= 200),
    secret     bytea       NOT NULL DEFAULT crier.api_random_secret(),
    created_at timestamptz NOT NULL DEFAULT now(),
    rotated_at timestamptz
);

-- The tenant's secret, created on first use.
CREATE FUNCTION crier.api_tenant_secret(p_tenant text) RETURNS bytea LANGUAGE plpgsql AS $$
DECLARE
    v_secret bytea;
BEGIN
    IF p_tenant IS NULL OR p_tenant = '' OR length(p_tenant) > 200 THEN
        RAISE EXCEPTION 'crier.api_tenant_secret: tenant must be a non-empty string of at most 200 characters'
            USING ERRCODE = '22023';
    END IF;
    SELECT secret INTO v_secret FROM crier.api_tenants WHERE tenant = p_tenant;
    IF v_secret IS NULL THEN
        INSERT INTO crier.api_tenants (tenant) VALUES (p_tenant) ON CONFLICT DO NOTHING;
        SELECT secret INTO v_secret FROM crier.api_tenants WHERE tenant = p_tenant;
    END IF;
    RETURN v_secret;
END;
$$;

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

-- Parses a request body: raises 22P02 (or 22P05, 22021) when it is not JSON.
-- Returns one row with name NULL, type = the document's JSON type and value =
-- its top-level keys outside p_names (comma-separated, NULL when none), then
-- one row per name of p_names in order: its JSON type (NULL when absent) and
-- value (a string's text, else the value's JSON text).
CREATE FUNCTION crier.api_fields(p_body text, p_names text[])
RETURNS TABLE (name text, type text, value text) LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_doc jsonb := p_body::jsonb;
BEGIN
    name := NULL;
    type := jsonb_typeof(v_doc);
    value := NULL;
    IF type = 'object' THEN
        SELECT string_agg(k, ', ' ORDER BY k) INTO value
        FROM jsonb_object_keys(v_doc) AS k WHERE k <> ALL (p_names);
    END IF;
    RETURN NEXT;
    IF jsonb_typeof(v_doc) <> 'object' THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT n.name, jsonb_typeof(v_doc -> n.name),
               CASE jsonb_typeof(v_doc -> n.name) WHEN 'string' THEN v_doc ->> n.name
                                                  ELSE (v_doc -> n.name)::text END
        FROM unnest(p_names) WITH ORDINALITY AS n(name, i)
        ORDER BY n.i;
END;
$$;

-- A tenant's dead letters — deliveries that failed permanently or spent their
-- schedule, and quarantined events — in one shape, newest first by
-- (sort_us, kind_rank, id): the keyset of GET /v1/dead. Filters are optional.
CREATE FUNCTION crier.api_dead_letters(p_tenant text, p_type text, p_channel text, p_since timestamptz,
                                       p_until timestamptz, p_kind text, p_id bigint, p_event bigint)
RETURNS TABLE (kind text, id bigint, event_id bigint, event_type text, entity_id text, recipient text,
               channel text, target text, attempts integer, died_at timestamptz, last_status integer,
               last_error text, sort_us bigint, kind_rank integer)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_tenant IS NULL THEN
        RAISE EXCEPTION 'crier.api_dead_letters: a tenant is required' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT x.* FROM (
        SELECT 'delivery'::text, d.id, n.event_id, n.event_type, n.entity_id, n.recipient_id, d.channel,
               d.target, d.attempts, d.dead_at,
               d.last_status, d.last_error,
               coalesce((extract(epoch FROM d.dead_at) * 1000000)::bigint, 0), 0
        FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
        WHERE d.state = 'dead' AND d.tenant = p_tenant
          AND (p_kind IS NULL OR p_kind = 'delivery') AND p_event IS NULL
          AND (p_id IS NULL OR d.id = p_id)
          AND (p_type IS NULL OR n.event_type = p_type) AND (p_channel IS NULL OR d.channel = p_channel)
          AND (p_since IS NULL OR d.dead_at >= p_since) AND (p_until IS NULL OR d.dead_at < p_until)
        UNION ALL
        SELECT 'event', e.id, e.id, e.event_type, e.entity_id, NULL, NULL, NULL, e.attempts, e.processed_at,
               NULL, e.last_error,
               coalesce((extract(epoch FROM e.processed_at) * 1000000)::bigint, 0), 1
        FROM crier.events e
        WHERE e.state = 'dead' AND e.tenant = p_tenant
          AND (p_kind IS NULL OR p_kind = 'event') AND p_id IS NULL AND p_channel IS NULL
          AND (p_event IS NULL OR e.id = p_event)
          AND (p_type IS NULL OR e.event_type = p_type)
          AND (p_since IS NULL OR e.processed_at >= p_since) AND (p_until IS NULL OR e.processed_at < p_until)
    ) AS x(kind, id, event_id, event_type, entity_id, recipient, channel, target, attempts, died_at,
           last_status, last_error, sort_us, kind_rank);
END;
$$;

-- Replays up to p_limit of a tenant's dead letters matching the filters: a
-- delivery is due now with a fresh retry schedule under the same key (its
-- disabled endpoint is enabled), an event is fanned out again. Only dead rows
-- are touched, so replaying twice sends nothing twice. remaining: dead letters
-- still matching afterwards (call again while it is above zero).
CREATE FUNCTION crier.api_replay_dead(p_tenant text, p_type text, p_channel text, p_since timestamptz,
                                      p_until timestamptz, p_kind text, p_id bigint, p_event bigint,
                                      p_limit integer,
                                      OUT deliveries integer, OUT events integer, OUT endpoints_enabled integer,
                                      OUT remaining bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_tenant IS NULL THEN
        RAISE EXCEPTION 'crier.api_replay_dead: a tenant is required' USING ERRCODE = '22023';
    END IF;
    WITH picked AS (
        SELECT x.id FROM crier.api_dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event) x
        WHERE x.kind = 'delivery' ORDER BY x.id LIMIT p_limit
    ), upd AS (
        UPDATE crier.deliveries d SET state = 'pending', due_at = now(), budget_start = d.attempts, dead_at = NULL
        FROM picked WHERE d.id = picked.id AND d.state = 'dead' AND d.tenant = p_tenant
        RETURNING d.tenant, d.channel, d.target
    ), ep AS (
        UPDATE crier.endpoints e SET state = 'active', consecutive_failures = 0, failing_since = NULL,
            paused_at = NULL, next_probe_at = NULL, probes = 0, disabled_at = NULL, updated_at = now()
        FROM (SELECT DISTINCT u.tenant, u.channel, u.target FROM upd u) u
        WHERE e.tenant = u.tenant AND e.channel = u.channel AND e.target = u.target AND e.state = 'disabled'
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM ep) INTO deliveries, endpoints_enabled;

    WITH picked AS (
        SELECT x.id FROM crier.api_dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event) x
        WHERE x.kind = 'event' ORDER BY x.id LIMIT greatest(p_limit - deliveries, 0)
    ), upd AS (
        UPDATE crier.events e SET state = 'pending', attempts = 0, available_at = now(), last_error = NULL,
            processed_at = NULL
        FROM picked WHERE e.id = picked.id AND e.state = 'dead' AND e.tenant = p_tenant
        RETURNING 1
    )
    SELECT count(*) INTO events FROM upd;

    SELECT count(*) INTO remaining
    FROM crier.api_dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event);
    IF deliveries > 0 THEN
        PERFORM pg_notify('crier_deliveries', '');
    END IF;
    IF events > 0 THEN
        PERFORM pg_notify('crier_events', '');
    END IF;
END;
$$;

-- A notification's overall status from its deliveries: pending (one waits, is
-- being sent or its endpoint is paused), dead (one died), suppressed (every
-- one was suppressed by a preference), delivered (otherwise, including a
-- notification with no delivery: in-app only).
CREATE FUNCTION crier.api_notification_status(p_id bigint) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN bool_or(d.state IN ('pending', 'sending', 'paused')) THEN 'pending'
                WHEN bool_or(d.state = 'dead') THEN 'dead'
                WHEN bool_and(d.state = 'suppressed') THEN 'suppressed'
                ELSE 'delivered' END
    FROM crier.deliveries d WHERE d.notification_id = p_id
$$;

-- A notification of p_tenant as JSON: its key, event, recipient, an overall
-- status, its feed item, and its deliveries with every attempt. NULL when the
-- tenant has no such notification.
CREATE FUNCTION crier.api_notification(p_tenant text, p_id bigint) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', n.id, 'key', n.key, 'message_id', 'msg_' || replace(n.key_hash::text, '-', ''),
        'event_id', n.event_id, 'type', n.event_type, 'entity_id', n.entity_id,
        'recipient', n.recipient_id, 'discriminator', n.discriminator, 'rules_version', n.rules_version,
        'created_at', n.created_at,
        'status', crier.api_notification_status(n.id),
        'feed_item', (SELECT f.id FROM crier.feed_items f WHERE f.notification_id = n.id),
        'deliveries', coalesce(json_agg(json_build_object(
            'id', d.id, 'channel', d.channel, 'target', d.target, 'state', d.state, 'attempts', d.attempts,
            'due_at', CASE WHEN d.state IN ('pending', 'paused') THEN d.due_at END,
            'delivered_at', d.delivered_at, 'dead_at', d.dead_at, 'last_status', d.last_status,
            'last_error', d.last_error,
            'attempt_log', (SELECT coalesce(json_agg(json_build_object(
                                'number', a.attempt, 'started_at', a.started_at,
                                'duration_ms', round(a.duration_ms::numeric, 3), 'outcome', a.outcome,
                                'status', a.status, 'error', a.error, 'response_excerpt', a.response_excerpt)
                                ORDER BY a.attempt), '[]'::json)
                            FROM crier.delivery_attempts a WHERE a.delivery_id = d.id))
            ORDER BY d.id) FILTER (WHERE d.id IS NOT NULL), '[]'::json))
    FROM crier.notifications n
    LEFT JOIN crier.deliveries d ON d.notification_id = n.id
    WHERE n.tenant = p_tenant AND n.id = p_id
    GROUP BY n.id
$$;

-- An event of p_tenant as JSON: its state and its first p_limit notifications
-- with their status. NULL when the tenant has no such event.
CREATE FUNCTION crier.api_event(p_tenant text, p_id bigint, p_limit integer) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', e.id, 'type', e.event_type, 'entity_id', e.entity_id, 'dedupe_key', e.dedupe_key,
        'payload', e.payload, 'state', e.state, 'attempts', e.attempts, 'last_error', e.last_error,
        'rules_version', e.rules_version, 'created_at', e.created_at, 'processed_at', e.processed_at,
        'notifications_total', (SELECT count(*) FROM crier.notifications n WHERE n.event_id = e.id),
        'notifications', (
            SELECT coalesce(json_agg(json_build_object('id', n.id, 'recipient', n.recipient_id,
                                                       'discriminator', n.discriminator,
                                                       'status', crier.api_notification_status(n.id))
                                     ORDER BY n.id), '[]'::json)
            FROM (SELECT * FROM crier.notifications n WHERE n.event_id = e.id ORDER BY n.id LIMIT p_limit) n))
    FROM crier.events e
    WHERE e.tenant = p_tenant AND e.id = p_id
$$;

-- Seconds since the oldest due event has been waiting for fan-out (0 when
-- none waits): the outbox lag that GET /healthz compares with its threshold.
CREATE FUNCTION crier.api_outbox_lag() RETURNS double precision LANGUAGE sql STABLE AS $$
    SELECT coalesce(extract(epoch FROM now() - min(available_at))::double precision, 0)
    FROM crier.events WHERE state = 'pending' AND available_at <= now()
$$;

-- The gauges of GET /metrics, one row per sample (at most two labels). No
-- tenant appears in any label. Counted from partial indexes only (pending,
-- dead, paused rows); terminal delivered rows are not counted (that would
-- scan the whole table on every scrape).
CREATE FUNCTION crier.api_metrics()
RETURNS TABLE (metric text, label1 text, value1 text, label2 text, value2 text, value double precision)
LANGUAGE sql STABLE AS $$
    SELECT 'crier_events', 'state', 'pending', NULL, NULL, count(*)::double precision
        FROM crier.events WHERE state = 'pending'
    UNION ALL
    SELECT 'crier_events', 'state', 'dead', NULL, NULL, count(*) FROM crier.events WHERE state = 'dead'
    UNION ALL
    SELECT 'crier_outbox_oldest_pending_seconds', NULL, NULL, NULL, NULL, crier.api_outbox_lag()
    UNION ALL
    SELECT 'crier_deliveries', 'state', s.state, NULL, NULL, coalesce(c.n, 0)
        FROM unnest(ARRAY['pending', 'sending', 'paused', 'dead']) AS s(state)
        LEFT JOIN (SELECT d.state, count(*)::double precision AS n FROM crier.deliveries d
                   WHERE d.state IN ('pending', 'sending') GROUP BY d.state
                   UNION ALL
                   SELECT 'paused', count(*) FROM crier.deliveries d WHERE d.state = 'paused'
                   UNION ALL
                   SELECT 'dead', count(*) FROM crier.deliveries d WHERE d.state = 'dead') c USING (state)
    UNION ALL
    SELECT 'crier_deliveries_oldest_due_seconds', NULL, NULL, NULL, NULL,
        coalesce(extract(epoch FROM now() - min(due_at))::double precision, 0)
        FROM crier.deliveries WHERE state = 'pending' AND due_at <= now()
    UNION ALL
    SELECT 'crier_endpoints', 'state', s.state, NULL, NULL,
        (SELECT count(*) FROM crier.endpoints e WHERE e.state = s.state)::double precision
        FROM unnest(ARRAY['paused', 'disabled']) AS s(state)
    UNION ALL
    SELECT 'crier_rules_info', 'worker', r.worker, 'version', r.version, 1 FROM crier.rules_status r
    UNION ALL
    SELECT 'crier_rules_reloads_total', 'worker', r.worker, 'result', 'ok', r.reloads_ok FROM crier.rules_status r
    UNION ALL
    SELECT 'crier_rules_reloads_total', 'worker', r.worker, 'result', 'failed', r.reloads_failed
        FROM crier.rules_status r
    UNION ALL
    SELECT 'crier_rules_last_reload_failed', 'worker', r.worker, NULL, NULL,
        CASE WHEN r.last_error IS NULL THEN 0 ELSE 1 END FROM crier.rules_status r
$$;
