-- dead_letters.sql — crier.dead_letters: dead letters for the CLI (every tenant, or one)
-- and the HTTP API (crier.api_dead_letters): dead deliveries (failed permanently or spent
-- their schedule) and quarantined events, one shape, filtered (NULL: no filter; p_tenant
-- NULL: every tenant). p_id picks a delivery, p_event an event. sort_us and kind_rank
-- order pages (newest first).
CREATE OR REPLACE FUNCTION crier.dead_letters(p_tenant text, p_type text, p_channel text, p_since timestamptz,
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
