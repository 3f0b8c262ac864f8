-- api_notification_status.sql — crier.api_notification_status: a notification's overall
-- status from its deliveries: pending (one waits, is being sent or its endpoint is
-- paused), dead (one died), suppressed (every one was suppressed by a preference),
-- delivered (otherwise, including a notification with no delivery: in-app only).
CREATE OR REPLACE FUNCTION crier.api_notification_status(p_id bigint) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN bool_or(d.state IN ('pending', 'sending', 'paused')) THEN 'pending'
                WHEN bool_or(d.state = 'dead') THEN 'dead'
                WHEN bool_and(d.state = 'suppressed') THEN 'suppressed'
                ELSE 'delivered' END
    FROM crier.deliveries d WHERE d.notification_id = p_id
$$;
