-- set_preference.sql — crier.set_preference: sets (or with p_enabled NULL, removes) one
-- stored user preference (crier.preferences).
CREATE OR REPLACE FUNCTION crier.set_preference(p_tenant text, p_recipient_id text, p_event_type text,
                                     p_channel text, p_enabled boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_tenant IS NULL OR p_tenant = '' OR p_recipient_id IS NULL OR p_recipient_id = '' THEN
        RAISE EXCEPTION 'crier.set_preference: tenant and recipient id are required' USING ERRCODE = '22023';
    END IF;
    IF p_event_type IS NULL OR (p_event_type <> '*' AND (length(p_event_type) > 200 OR p_event_type !~ '^[A-Za-z0-9_.-]+$')) THEN
        RAISE EXCEPTION 'crier.set_preference: event type must be ''*'' or a type name, got %',
            coalesce(quote_literal(p_event_type), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_channel IS NULL OR p_channel NOT IN ('*', 'webhook', 'email', 'kafka', 'feed') THEN
        RAISE EXCEPTION 'crier.set_preference: channel must be *, webhook, email, kafka or feed, got %',
            coalesce(quote_literal(p_channel), 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_enabled IS NULL THEN
        DELETE FROM crier.preferences WHERE tenant = p_tenant AND recipient_id = p_recipient_id
            AND event_type = p_event_type AND channel = p_channel;
    ELSE
        INSERT INTO crier.preferences (tenant, recipient_id, event_type, channel, enabled)
        VALUES (p_tenant, p_recipient_id, p_event_type, p_channel, p_enabled)
        ON CONFLICT (tenant, recipient_id, event_type, channel)
        DO UPDATE SET enabled = EXCLUDED.enabled, updated_at = now();
    END IF;
END;
$$;
