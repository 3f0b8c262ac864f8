-- api_notification_status.sql — crier.api_notification_status: a notification's overall
-- status over every channel, the in-app feed included: pending (a delivery waits, is
-- being sent or its endpoint is paused, is held by a delay, or joined a digest that is
-- not sent yet or whose own delivery waits), dead (a delivery died, or the digest that
-- carried it), delivered (a delivery arrived, or the digest that carried it, or the
-- notification is in the person's feed), suppressed (nothing reached the person: every
-- channel was muted by a preference — a muted feed leaves no feed item — throttled or
-- cancelled, or the rule gave no channel).
CREATE OR REPLACE FUNCTION crier.api_notification_status(p_id bigint) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN bool_or(d.state IN ('pending', 'sending', 'paused', 'timing', 'held')
                             OR (d.state = 'digested'
                                 AND coalesce(gd.state IN ('pending', 'sending', 'paused'), true))) THEN 'pending'
                WHEN bool_or(d.state = 'dead' OR gd.state = 'dead') THEN 'dead'
                WHEN bool_or(d.state = 'delivered' OR gd.state = 'delivered')
                     OR EXISTS (SELECT FROM crier.feed_items f WHERE f.notification_id = p_id) THEN 'delivered'
                ELSE 'suppressed' END
    FROM crier.deliveries d
    -- a digested delivery reached the person, or not, with its digest's own delivery
    LEFT JOIN crier.digests g ON d.state = 'digested' AND g.id = d.digest_id
    LEFT JOIN crier.deliveries gd ON gd.notification_id = g.notification_id
    WHERE d.notification_id = p_id
$$;
