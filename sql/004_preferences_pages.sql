-- 004_preferences_pages.sql — stored user preferences (opt-out per event type
-- and per channel) applied when deliveries are written, and the cursor of an
-- event whose audience is fanned out page by page.

-- A preference: recipient_id in tenant does (enabled) or does not want
-- event_type on channel; '*' matches any. The most specific row decides:
-- (type, channel) over (type, *) over (*, channel) over (*, *); no row = wanted.
-- Event types a rule declares required = true, and rules that say
-- preferences = "ignore", are delivered regardless.
CREATE TABLE crier.preferences (
    tenant       text        NOT NULL,
    recipient_id text        NOT NULL,
    event_type   text        NOT NULL DEFAULT '*',
    channel      text        NOT NULL DEFAULT '*',
    enabled      boolean     NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, recipient_id, event_type, channel)
);

-- Sets (or with p_enabled NULL, removes) one preference.
CREATE FUNCTION crier.set_preference(p_tenant text, p_recipient_id text, p_event_type text,
                                     p_channel text, p_enabled boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_tenant IS NULL OR p_tenant = '' OR p_recipient_id IS NULL OR p_recipient_id = '' THEN
        RAISE EXCEPTION 'crier.set_preference: tenant and recipient id are required' USING ERRCODE = '22023';
    END IF;
    IF p_event_type IS NULL OR (p_event_type <> '*' AND p_event_type !~ '^[A-Za-z0-9_.-]{1,200}$') THEN
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

-- suppressed: not sent, by the recipient's preference (last_error says which).
ALTER TABLE crier.deliveries DROP CONSTRAINT deliveries_state_check;
ALTER TABLE crier.deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'sending', 'paused', 'delivered', 'dead', 'suppressed'));

-- Paged audiences: where the next page starts (NULL: from the beginning).
ALTER TABLE crier.events ADD COLUMN cursor text, ADD COLUMN pages integer NOT NULL DEFAULT 0;
