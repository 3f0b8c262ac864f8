-- leave_audience.sql — crier.leave_audience: a person leaves an audience: the items they
-- saw up to now stay in their feed, later ones do not appear.
CREATE OR REPLACE FUNCTION crier.leave_audience(p_tenant text, p_audience text, p_recipient text) RETURNS void
LANGUAGE sql AS $$
    UPDATE crier.memberships SET left_at = now(), left_position = crier.feed_position_now()
    WHERE tenant = p_tenant AND audience = p_audience AND recipient_id = p_recipient AND left_at IS NULL
$$;
