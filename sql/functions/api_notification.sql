-- api_notification.sql — crier.api_notification: a notification of p_tenant as JSON (GET
-- /v1/notifications/{id}): its key, event, recipient, an overall status, its feed item,
-- and its deliveries with every attempt. NULL when the tenant has no such notification.
CREATE OR REPLACE FUNCTION crier.api_notification(p_tenant text, p_id bigint) RETURNS json
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
