-- set_recipient_settings.sql — crier.set_recipient_settings: sets a person's
-- stored settings (crier.recipient_settings) from a JSON object whose keys are
-- any of "time_zone", "locale", "quiet_hours"; a key that is present replaces
-- that field (JSON null clears it), an absent key leaves it as it was. Every
-- field is validated and nothing is written when one is wrong. Returns the
-- settings as stored, as a JSON object. crier.check_quiet_hours validates a
-- quiet-hours array on its own (also used by the rules' loader's tests).
CREATE OR REPLACE FUNCTION crier.check_quiet_hours(p_where text, p_quiet jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_period jsonb;
    v_day    jsonb;
    v_key    text;
BEGIN
    IF jsonb_typeof(p_quiet) <> 'array' THEN
        RAISE EXCEPTION '%: quiet_hours must be a JSON array of periods like {"from": "22:00", "to": "07:00"}, got %',
            p_where, jsonb_typeof(p_quiet) USING ERRCODE = '22023';
    END IF;
    IF jsonb_array_length(p_quiet) > 14 THEN
        RAISE EXCEPTION '%: quiet_hours has % periods; at most 14 are allowed', p_where, jsonb_array_length(p_quiet)
            USING ERRCODE = '22023';
    END IF;
    FOR v_period IN SELECT value FROM jsonb_array_elements(p_quiet) LOOP
        IF jsonb_typeof(v_period) <> 'object' THEN
            RAISE EXCEPTION '%: each quiet_hours period must be an object like {"from": "22:00", "to": "07:00"}', p_where
                USING ERRCODE = '22023';
        END IF;
        FOR v_key IN SELECT jsonb_object_keys(v_period) LOOP
            IF v_key NOT IN ('from', 'to', 'days') THEN
                RAISE EXCEPTION '%: unknown quiet_hours field %; use "from", "to" and optionally "days"',
                    p_where, quote_literal(v_key) USING ERRCODE = '22023';
            END IF;
        END LOOP;
        FOREACH v_key IN ARRAY ARRAY['from', 'to'] LOOP
            IF jsonb_typeof(v_period -> v_key) IS DISTINCT FROM 'string'
               OR (v_period ->> v_key) !~ '^([01][0-9]|2[0-3]):[0-5][0-9]$' THEN
                RAISE EXCEPTION '%: quiet_hours "%" must be a local time "HH:MM" (00:00-23:59), got %',
                    p_where, v_key, coalesce((v_period -> v_key)::text, 'nothing') USING ERRCODE = '22023';
            END IF;
        END LOOP;
        IF v_period ->> 'from' = v_period ->> 'to' THEN
            RAISE EXCEPTION '%: quiet_hours period from % to % is empty; give different times', p_where,
                v_period ->> 'from', v_period ->> 'to' USING ERRCODE = '22023';
        END IF;
        IF v_period ? 'days' THEN
            IF jsonb_typeof(v_period -> 'days') <> 'array' OR jsonb_array_length(v_period -> 'days') = 0 THEN
                RAISE EXCEPTION '%: quiet_hours "days" must be a non-empty array of "mon".."sun"', p_where
                    USING ERRCODE = '22023';
            END IF;
            FOR v_day IN SELECT value FROM jsonb_array_elements(v_period -> 'days') LOOP
                IF jsonb_typeof(v_day) <> 'string'
                   OR (v_day #>> '{}') NOT IN ('mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun') THEN
                    RAISE EXCEPTION '%: quiet_hours day % is not one of "mon", "tue", "wed", "thu", "fri", "sat", "sun"',
                        p_where, v_day::text USING ERRCODE = '22023';
                END IF;
            END LOOP;
        END IF;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION crier.set_recipient_settings(p_tenant text, p_recipient_id text, p_settings jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_key  text;
    v_zone text;
    v_loc  text;
    v_row  crier.recipient_settings;
BEGIN
    IF p_tenant IS NULL OR p_tenant = '' OR p_recipient_id IS NULL OR p_recipient_id = '' THEN
        RAISE EXCEPTION 'crier.set_recipient_settings: tenant and recipient id are required' USING ERRCODE = '22023';
    END IF;
    IF p_settings IS NULL OR jsonb_typeof(p_settings) <> 'object' THEN
        RAISE EXCEPTION 'crier.set_recipient_settings: settings must be a JSON object with any of "time_zone", "locale", "quiet_hours"'
            USING ERRCODE = '22023';
    END IF;
    FOR v_key IN SELECT jsonb_object_keys(p_settings) LOOP
        IF v_key NOT IN ('time_zone', 'locale', 'quiet_hours') THEN
            RAISE EXCEPTION 'crier.set_recipient_settings: unknown setting %; use "time_zone", "locale" or "quiet_hours"',
                quote_literal(v_key) USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF jsonb_typeof(p_settings -> 'time_zone') = 'string' THEN
        v_zone := p_settings ->> 'time_zone';
        IF v_zone !~ '^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$'
           OR NOT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = v_zone) THEN
            RAISE EXCEPTION 'crier.set_recipient_settings: % is not a time zone of the IANA database; use a name like "Europe/Berlin" or "America/Los_Angeles"',
                quote_literal(v_zone) USING ERRCODE = '22023';
        END IF;
    ELSIF p_settings ? 'time_zone' AND jsonb_typeof(p_settings -> 'time_zone') <> 'null' THEN
        RAISE EXCEPTION 'crier.set_recipient_settings: time_zone must be a string like "Europe/Berlin" or null'
            USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(p_settings -> 'locale') = 'string' THEN
        v_loc := p_settings ->> 'locale';
        IF v_loc !~ '^[a-z]{2,3}(-[A-Za-z0-9]{1,8})*$' OR length(v_loc) > 35 THEN
            RAISE EXCEPTION 'crier.set_recipient_settings: % is not a locale tag; use a language code with optional subtags, like "de", "de-AT" or "pt-BR"',
                quote_literal(v_loc) USING ERRCODE = '22023';
        END IF;
    ELSIF p_settings ? 'locale' AND jsonb_typeof(p_settings -> 'locale') <> 'null' THEN
        RAISE EXCEPTION 'crier.set_recipient_settings: locale must be a string like "de-AT" or null'
            USING ERRCODE = '22023';
    END IF;
    IF p_settings ? 'quiet_hours' AND jsonb_typeof(p_settings -> 'quiet_hours') <> 'null' THEN
        PERFORM crier.check_quiet_hours('crier.set_recipient_settings', p_settings -> 'quiet_hours');
    END IF;

    INSERT INTO crier.recipient_settings AS s (tenant, recipient_id, time_zone, locale, quiet_hours)
    VALUES (p_tenant, p_recipient_id, v_zone, v_loc,
            CASE WHEN jsonb_typeof(p_settings -> 'quiet_hours') = 'array' THEN p_settings -> 'quiet_hours' END)
    ON CONFLICT (tenant, recipient_id) DO UPDATE SET
        time_zone   = CASE WHEN p_settings ? 'time_zone' THEN EXCLUDED.time_zone ELSE s.time_zone END,
        locale      = CASE WHEN p_settings ? 'locale' THEN EXCLUDED.locale ELSE s.locale END,
        quiet_hours = CASE WHEN p_settings ? 'quiet_hours' THEN EXCLUDED.quiet_hours ELSE s.quiet_hours END,
        updated_at  = now()
    RETURNING * INTO v_row;
    RETURN jsonb_build_object('time_zone', v_row.time_zone, 'locale', v_row.locale,
                              'quiet_hours', v_row.quiet_hours, 'updated_at', v_row.updated_at);
END;
$$;
