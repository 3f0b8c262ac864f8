-- api_notification.sql — crier.api_notification: a notification of p_tenant as JSON (GET
-- /v1/notifications/{id}): its key, event, recipient, an overall status, its feed item,
-- and its deliveries with every attempt and the time decisions about them (docs/API.md):
-- why a delivery waits and until when (held_because, held_until: a delay, the recipient's
-- quiet hours, or the digest it joined), the rule's delay and throttle, and the digest it joined — its window, and once
-- sent the digest's own notification and its delivery's state. NULL when the tenant has no
-- such notification.
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
            'id', d.id, 'channel', d.channel, 'target', d.target,
            'state', crier.delivery_state(d.state, d.lease_until), 'attempts', d.attempts,
            'due_at', CASE WHEN crier.delivery_state(d.state, d.lease_until) IN ('pending', 'paused') THEN d.due_at END,
            'delivered_at', d.delivered_at, 'dead_at', d.dead_at, 'last_status', d.last_status,
            'last_error', d.last_error,
            -- why it waits: a delay or the recipient's quiet hours (until due_at: a pending timer
            -- whose outcome reads 'quiet hours' is the latter, crier.release_delivery), or the
            -- digest it joined (until the digest's timer, which quiet hours may postpone)
            'held_because', CASE d.state
                WHEN 'held' THEN CASE WHEN EXISTS (SELECT 1 FROM crier.timers qt
                                                   WHERE qt.delivery_id = d.id AND qt.state = 'pending'
                                                     AND qt.outcome = 'quiet hours')
                                      THEN 'quiet_hours' ELSE 'delay' END
                WHEN 'digested' THEN 'digest' END,
            'held_until', CASE WHEN d.state = 'held' THEN d.due_at
                               WHEN d.state = 'digested' AND g.state <> 'sent'
                               THEN coalesce(gt.due_at, g.window_end) END,
            'delay', CASE WHEN d.timing ? 'delay' THEN json_build_object(
                         'seconds', (d.timing->>'delay')::numeric, 'unless', d.timing->>'unless',
                         'cancel_on', d.timing->'cancel_on') END,
            'throttle', CASE WHEN d.timing ? 'throttle' THEN json_build_object(
                            'limit', (d.timing->'throttle'->>'limit')::numeric,
                            'per_seconds', (d.timing->'throttle'->>'per')::numeric,
                            'key', d.timing->'throttle'->>'key') END,
            'quiet_hours', d.timing->'quiet',
            'digest', CASE WHEN g.id IS NOT NULL THEN json_build_object(
                          'id', g.id, 'key', g.digest_key, 'state', g.state, 'items', g.items,
                          'max_items', g.max_items, 'window_start', g.window_start, 'window_end', g.window_end,
                          'sent_at', g.sent_at,
                          'notification', CASE WHEN gn.id IS NOT NULL THEN json_build_object(
                              'id', gn.id, 'key', gn.key, 'delivery_id', gd.id, 'state', crier.delivery_state(gd.state, gd.lease_until)) END) END,
            'attempt_log', (SELECT coalesce(json_agg(json_build_object(
                                'number', a.attempt, 'started_at', a.started_at,
                                'duration_ms', round(a.duration_ms::numeric, 3), 'outcome', a.outcome,
                                'status', a.status, 'error', a.error, 'response_excerpt', a.response_excerpt)
                                ORDER BY a.attempt), '[]'::json)
                            FROM crier.delivery_attempts a WHERE a.delivery_id = d.id))
            ORDER BY d.id) FILTER (WHERE d.id IS NOT NULL), '[]'::json))
    FROM crier.notifications n
    LEFT JOIN crier.deliveries d ON d.notification_id = n.id
    LEFT JOIN crier.digests g ON g.id = d.digest_id AND g.tenant = n.tenant
    LEFT JOIN crier.timers gt ON gt.digest_id = g.id AND gt.state = 'pending'
    LEFT JOIN crier.notifications gn ON gn.id = g.notification_id AND gn.tenant = n.tenant
    LEFT JOIN crier.deliveries gd ON gd.notification_id = gn.id
    WHERE n.tenant = p_tenant AND n.id = p_id
    GROUP BY n.id
$$;
