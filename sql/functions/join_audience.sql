-- join_audience.sql — crier.join_audience: a person joins an audience: from now on, they
-- see the audience's items from this position on (and items that backfill).
CREATE OR REPLACE FUNCTION crier.join_audience(p_tenant text, p_audience text, p_recipient text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO crier.memberships (tenant, audience, recipient_id, joined_position)
    SELECT p_tenant, p_audience, p_recipient, crier.feed_position_now()
    WHERE NOT EXISTS (SELECT 1 FROM crier.memberships WHERE tenant = p_tenant AND audience = p_audience
                      AND recipient_id = p_recipient AND left_at IS NULL)
$$;
