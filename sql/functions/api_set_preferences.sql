-- api_set_preferences.sql — crier.api_set_preferences: applies the changes of
-- PATCH /v1/preferences to a person's stored preferences and settings through
-- crier.set_preference and crier.set_recipient_settings, checking every entry
-- so that a wrong one is named by its place ("preferences[2]: …"), and returns
-- the document of crier.api_preferences. A failure raises 22023; the caller's
-- transaction then keeps nothing of the request.
-- p_preferences: a JSON array of {"event_type", "channel", "enabled"} (enabled
-- null removes that preference; the last entry for a (type, channel) counts);
-- p_settings: an object for
-- crier.set_recipient_settings. Either may be NULL (left as it is), not both.
CREATE OR REPLACE FUNCTION crier.api_set_preferences(p_tenant text, p_recipient_id text,
                                                     p_preferences jsonb, p_settings jsonb)
RETURNS json LANGUAGE plpgsql AS $$
DECLARE
    v_item  jsonb;
    v_index bigint;
    v_key   text;
    v_where text;
BEGIN
    IF p_preferences IS NULL AND p_settings IS NULL THEN
        RAISE EXCEPTION 'nothing to change: give "preferences" (a list of {"event_type", "channel", "enabled"}) and/or "settings" (any of "time_zone", "locale", "quiet_hours")'
            USING ERRCODE = '22023';
    END IF;
    IF p_preferences IS NOT NULL THEN
        IF jsonb_typeof(p_preferences) <> 'array' THEN
            RAISE EXCEPTION 'preferences must be a JSON array of {"event_type": "...", "channel": "...", "enabled": true, false or null}, got %',
                jsonb_typeof(p_preferences) USING ERRCODE = '22023';
        END IF;
        IF jsonb_array_length(p_preferences) > 100 THEN
            RAISE EXCEPTION 'preferences has % entries; at most 100 are allowed in one request',
                jsonb_array_length(p_preferences) USING ERRCODE = '22023';
        END IF;
        FOR v_item, v_index IN SELECT value, ordinality - 1 FROM jsonb_array_elements(p_preferences) WITH ORDINALITY LOOP
            v_where := format('preferences[%s]', v_index);
            IF jsonb_typeof(v_item) <> 'object' THEN
                RAISE EXCEPTION '%: each entry must be an object like {"event_type": "digest.weekly", "channel": "email", "enabled": false}, got %',
                    v_where, jsonb_typeof(v_item) USING ERRCODE = '22023';
            END IF;
            FOR v_key IN SELECT jsonb_object_keys(v_item) LOOP
                IF v_key NOT IN ('event_type', 'channel', 'enabled') THEN
                    RAISE EXCEPTION '%: unknown field %; use "event_type", "channel" and "enabled"',
                        v_where, quote_literal(v_key) USING ERRCODE = '22023';
                END IF;
            END LOOP;
            FOREACH v_key IN ARRAY ARRAY['event_type', 'channel'] LOOP
                IF jsonb_typeof(v_item -> v_key) IS DISTINCT FROM 'string' THEN
                    RAISE EXCEPTION '%: % must be a string (a name, or "*" for any), got %',
                        v_where, v_key, coalesce(jsonb_typeof(v_item -> v_key), 'nothing') USING ERRCODE = '22023';
                END IF;
            END LOOP;
            IF NOT v_item ? 'enabled' OR jsonb_typeof(v_item -> 'enabled') NOT IN ('boolean', 'null') THEN
                RAISE EXCEPTION '%: enabled must be true, false or null (null removes the preference), got %',
                    v_where, coalesce(jsonb_typeof(v_item -> 'enabled'), 'nothing') USING ERRCODE = '22023';
            END IF;
        END LOOP;
        -- written in one order (type, channel), whatever the request's, so
        -- that two requests for the same person wait for each other instead
        -- of deadlocking; of one (type, channel) given twice, the last counts
        BEGIN -- one subtransaction for the lot (one per entry would overflow its cache)
            FOR v_item, v_index IN
                SELECT DISTINCT ON ((e.value ->> 'event_type') COLLATE "C", (e.value ->> 'channel') COLLATE "C")
                       e.value, e.ordinality - 1
                FROM jsonb_array_elements(p_preferences) WITH ORDINALITY e
                ORDER BY (e.value ->> 'event_type') COLLATE "C", (e.value ->> 'channel') COLLATE "C", e.ordinality DESC
            LOOP
                v_where := format('preferences[%s]', v_index);
                PERFORM crier.set_preference(p_tenant, p_recipient_id, v_item ->> 'event_type', v_item ->> 'channel',
                                             CASE WHEN jsonb_typeof(v_item -> 'enabled') = 'boolean'
                                                  THEN (v_item ->> 'enabled')::boolean END);
            END LOOP;
        EXCEPTION WHEN SQLSTATE '22023' THEN
            RAISE EXCEPTION '%: %', v_where, regexp_replace(SQLERRM, '^crier\.set_preference: ', '')
                USING ERRCODE = '22023';
        END;
    END IF;
    IF p_settings IS NOT NULL THEN
        BEGIN
            PERFORM crier.set_recipient_settings(p_tenant, p_recipient_id, p_settings);
        EXCEPTION WHEN SQLSTATE '22023' THEN
            RAISE EXCEPTION 'settings: %', regexp_replace(SQLERRM, '^crier\.set_recipient_settings: ', '')
                USING ERRCODE = '22023';
        END;
    END IF;
    RETURN crier.api_preferences(p_tenant, p_recipient_id);
END;
$$;
