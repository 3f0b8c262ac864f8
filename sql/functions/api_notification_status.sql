-- api_notification_status.sql — crier.api_notification_status: a notification's overall
-- status over every channel, the in-app feed included: pending (a delivery waits, is
-- being sent or its endpoint is paused), dead (a delivery died), delivered (a delivery
-- arrived, or the notification is in the person's feed), suppressed (nothing reached
-- the person: every channel was muted by a preference — a muted feed leaves no feed
-- item — or the rule gave no channel).
CREATE OR REPLACE FUNCTION crier.api_notification_status(p_id bigint) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN bool_or(d.state IN ('pending', 'sending', 'paused')) THEN 'pending'
                WHEN bool_or(d.state = 'dead') THEN 'dead'
                WHEN bool_or(d.state = 'delivered')
                     OR EXISTS (SELECT FROM crier.feed_items f WHERE f.notification_id = p_id) THEN 'delivered'
                ELSE 'suppressed' END
    FROM crier.deliveries d WHERE d.notification_id = p_id
$$;
