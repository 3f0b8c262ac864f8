-- 017_recipient_settings.sql — what a person has said about when and how to be
-- told, beside their per-type/channel preferences (004): their IANA time zone,
-- their locale and their quiet hours. Set by crier.set_recipient_settings
-- (sql/functions/set_recipient_settings.sql), which validates every field; read
-- by the fan-out, which gives the recipient object these fields when the rules'
-- recipients function did not.
--
-- quiet_hours: a JSON array of periods {"from": "HH:MM", "to": "HH:MM",
-- "days": ["mon", …]} in the person's local time; a period whose "to" is not
-- after its "from" ends the next day; "days" (optional: every day) are the
-- weekdays on which a period starts. [] says "no quiet hours" (it overrides a
-- rule's default); NULL says nothing (the rule's default applies).
CREATE TABLE crier.recipient_settings (
    tenant       text        NOT NULL,
    recipient_id text        NOT NULL,
    time_zone    text,
    locale       text,
    quiet_hours  jsonb,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, recipient_id),
    CHECK (locale IS NULL OR locale ~ '^[a-z]{2,3}(-[A-Za-z0-9]{1,8})*$'),
    CHECK (quiet_hours IS NULL OR jsonb_typeof(quiet_hours) = 'array')
);
