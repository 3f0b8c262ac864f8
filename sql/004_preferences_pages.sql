-- 004_preferences_pages.sql — stored user preferences (opt-out per event type
-- and per channel) applied when deliveries are written (set by
-- sql/functions/set_preference.sql), and the cursor of an event whose audience
-- is fanned out page by page.

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

-- suppressed: not sent, by the recipient's preference (last_error says which).
ALTER TABLE crier.deliveries DROP CONSTRAINT deliveries_state_check;
ALTER TABLE crier.deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'sending', 'paused', 'delivered', 'dead', 'suppressed'));

-- Paged audiences: where the next page starts (NULL: from the beginning).
ALTER TABLE crier.events ADD COLUMN cursor text, ADD COLUMN pages integer NOT NULL DEFAULT 0;
