-- 010_dead_letters.sql — one definition of "dead letters" for the CLI (every
-- tenant, or one) and the HTTP API (always one tenant): crier.dead_letters and
-- crier.replay_dead take NULL as "every tenant"; crier.api_dead_letters and
-- crier.api_replay_dead (sql/006) become wrappers that insist on a tenant.

-- Dead deliveries (failed permanently or spent their schedule) and quarantined
-- events, one shape, filtered (NULL: no filter). p_id picks a delivery,
-- p_event an event. sort_us and kind_rank order pages (newest first).
CREATE FUNCTION crier.dead_letters(p_tenant text, p_type text, p_channel text, p_since timestamptz,
                                   p_until timestamptz, p_kind text, p_id bigint, p_event bigint)
RETURNS TABLE (kind text, id bigint, tenant text, event_id bigint, event_type text, entity_id text,
               recipient text, channel text, target text, attempts integer, died_at timestamptz,
               last_status integer, last_error text, sort_us bigint, kind_rank integer)
LANGUAGE sql STABLE AS $$
    SELECT 'delivery'::text, d.id, d.tenant, n.event_id, n.event_type, n.entity_id, n.recipient_id,
           d.channel, d.target, d.attempts, d.dead_at, d.last_status, d.last_error,
           coalesce((extract(epoch FROM d.dead_at) * 1000000)::bigint, 0), 0
    FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
    WHERE d.state = 'dead' AND (p_tenant IS NULL OR d.tenant = p_tenant)
      AND (p_kind IS NULL OR p_kind = 'delivery') AND p_event IS NULL
      AND (p_id IS NULL OR d.id = p_id)
      AND (p_type IS NULL OR n.event_type = p_type) AND (p_channel IS NULL OR d.channel = p_channel)
      AND (p_since IS NULL OR d.dead_at >= p_since) AND (p_until IS NULL OR d.dead_at < p_until)
    UNION ALL
    SELECT 'event', e.id, e.tenant, e.id, e.event_type, e.entity_id, NULL, NULL, NULL, e.attempts,
           e.processed_at, NULL, e.last_error,
           coalesce((extract(epoch FROM e.processed_at) * 1000000)::bigint, 0), 1
    FROM crier.events e
    WHERE e.state = 'dead' AND (p_tenant IS NULL OR e.tenant = p_tenant)
      AND (p_kind IS NULL OR p_kind = 'event') AND p_id IS NULL AND p_channel IS NULL
      AND (p_event IS NULL OR e.id = p_event)
      AND (p_type IS NULL OR e.event_type = p_type)
      AND (p_since IS NULL OR e.processed_at >= p_since) AND (p_until IS NULL OR e.processed_at < p_until)
$$;

-- Replays up to p_limit dead letters matching the filters (p_tenant NULL:
-- every tenant's): a delivery is due now with a fresh retry schedule under the
-- same key (its disabled endpoint is enabled), an event is fanned out again.
-- Only dead rows are touched, so replaying twice sends nothing twice.
-- remaining: dead letters still matching afterwards (call again while above 0).
CREATE FUNCTION crier.replay_dead(p_tenant text, p_type text, p_channel text, p_since timestamptz,
                                  p_until timestamptz, p_kind text, p_id bigint, p_event bigint,
                                  p_limit integer,
                                  OUT deliveries integer, OUT events integer, OUT endpoints_enabled integer,
                                  OUT remaining bigint)
LANGUAGE plpgsql AS $$
BEGIN
    WITH picked AS (
        SELECT x.id FROM crier.dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event) x
        WHERE x.kind = 'delivery' ORDER BY x.id LIMIT p_limit
    ), upd AS (
        UPDATE crier.deliveries d SET state = 'pending', due_at = now(), budget_start = d.attempts, dead_at = NULL
        FROM picked WHERE d.id = picked.id AND d.state = 'dead'
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
        SELECT x.id FROM crier.dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event) x
        WHERE x.kind = 'event' ORDER BY x.id LIMIT greatest(p_limit - deliveries, 0)
    ), upd AS (
        UPDATE crier.events e SET state = 'pending', attempts = 0, available_at = now(), last_error = NULL,
            processed_at = NULL
        FROM picked WHERE e.id = picked.id AND e.state = 'dead'
        RETURNING 1
    )
    SELECT count(*) INTO events FROM upd;

    SELECT count(*) INTO remaining
    FROM crier.dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event);
    IF deliveries > 0 THEN
        PERFORM pg_notify('crier_deliveries', '');
    END IF;
    IF events > 0 THEN
        PERFORM pg_notify('crier_events', '');
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION crier.api_dead_letters(p_tenant text, p_type text, p_channel text, p_since timestamptz,
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
    SELECT x.kind, x.id, x.event_id, x.event_type, x.entity_id, x.recipient, x.channel, x.target, x.attempts,
           x.died_at, x.last_status, x.last_error, x.sort_us, x.kind_rank
    FROM crier.dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event) x;
END;
$$;

CREATE OR REPLACE FUNCTION crier.api_replay_dead(p_tenant text, p_type text, p_channel text, p_since timestamptz,
                                                 p_until timestamptz, p_kind text, p_id bigint, p_event bigint,
                                                 p_limit integer,
                                                 OUT deliveries integer, OUT events integer,
                                                 OUT endpoints_enabled integer, OUT remaining bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_tenant IS NULL THEN
        RAISE EXCEPTION 'crier.api_replay_dead: a tenant is required' USING ERRCODE = '22023';
    END IF;
    SELECT r.deliveries, r.events, r.endpoints_enabled, r.remaining
    INTO deliveries, events, endpoints_enabled, remaining
    FROM crier.replay_dead(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event, p_limit) r;
END;
$$;
