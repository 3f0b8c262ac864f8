-- api_event.sql — crier.api_event: an event of p_tenant as JSON (GET /v1/events/{id}):
-- its state (and not_before, the time of a scheduled send) and its first p_limit notifications
-- with their status. NULL when the tenant has no such event.
CREATE OR REPLACE FUNCTION crier.api_event(p_tenant text, p_id bigint, p_limit integer) RETURNS json
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', e.id, 'type', e.event_type, 'entity_id', e.entity_id, 'dedupe_key', e.dedupe_key,
        'payload', e.payload, 'state', e.state, 'not_before', e.not_before, 'attempts', e.attempts,
        'last_error', e.last_error,
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
