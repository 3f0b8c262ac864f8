-- suppression_reason.sql — crier.suppression_reason: the class of a suppressed
-- delivery's last_error, the reason label of crier_notifications_suppressed_total:
-- 'preference', 'throttle', 'cancel_on', 'unless_read', 'unless_seen' or 'other'.
CREATE OR REPLACE FUNCTION crier.suppression_reason(p_error text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_error LIKE 'suppressed by the recipient''s preference%' THEN 'preference'
                WHEN p_error LIKE 'throttled:%' THEN 'throttle'
                WHEN p_error LIKE '%(cancel_on)%' THEN 'cancel_on'
                WHEN p_error LIKE '%(unless = "read")%' THEN 'unless_read'
                WHEN p_error LIKE '%(unless = "seen")%' THEN 'unless_seen'
                ELSE 'other' END
$$;
