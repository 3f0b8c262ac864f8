-- quiet_hours_end.sql — crier.quiet_hours_end: when the quiet hours that contain the
-- instant p_at end, for a person in time zone p_zone (an IANA name; NULL or unknown: UTC)
-- with quiet hours p_quiet (the JSON array of crier.check_quiet_hours: periods
-- {"from": "HH:MM", "to": "HH:MM", "days": ["mon", …]} in local time; a period whose "to"
-- is not after its "from" ends the next day; "days" are the weekdays a period starts on,
-- all when absent). Returns NULL when p_at is outside every period (or p_quiet is NULL or
-- empty), else the instant the quiet time ends — following periods that begin before
-- (or as) the previous one ends, for up to a week. Local times become instants through PostgreSQL's tz
-- database (timestamp AT TIME ZONE), so the answer is right across DST changes: a
-- period's start and end are the instants its local times name on that date (a local
-- time skipped by a spring-forward counts as the instant after the gap). The one place
-- crier decides quiet hours (crier.release_delivery holds a delivery, crier.fire_timers
-- postpones a digest).
CREATE OR REPLACE FUNCTION crier.quiet_hours_end(p_at timestamptz, p_zone text, p_quiet jsonb)
RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_zone text := coalesce(p_zone, 'UTC');
    v_at timestamptz := p_at;
    v_end timestamptz;
    v_found boolean := false;
    v_round integer;
BEGIN
    IF p_at IS NULL OR p_quiet IS NULL OR jsonb_typeof(p_quiet) <> 'array' OR jsonb_array_length(p_quiet) = 0 THEN
        RETURN NULL;
    END IF;
    BEGIN -- (not pg_timezone_names: it reads the whole tz directory, milliseconds per call)
        PERFORM p_at AT TIME ZONE v_zone;
    EXCEPTION WHEN invalid_parameter_value THEN
        v_zone := 'UTC';
    END;
    -- each round moves to the end of a period: a chain can take every period on each day of
    -- a week (and a spare); quiet hours that never end stop there, to be held again then
    FOR v_round IN 1 .. 8 * jsonb_array_length(p_quiet) + 1 LOOP
        SELECT max(e) INTO v_end
        FROM (
            SELECT ((d + (p->>'to')::time + CASE WHEN (p->>'to')::time <= (p->>'from')::time
                                                 THEN interval '1 day' ELSE interval '0' END)
                    AT TIME ZONE v_zone) AS e,
                   ((d + (p->>'from')::time) AT TIME ZONE v_zone) AS s
            FROM jsonb_array_elements(p_quiet) AS q(p),
                 -- the local dates a period containing v_at can start on: the day before, and that day
                 LATERAL (SELECT ((v_at AT TIME ZONE v_zone)::date - k) AS d FROM generate_series(0, 1) AS k) AS days
            WHERE NOT (p ? 'days')
               OR (p->'days') ? (ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'])[extract(dow FROM d)::int + 1]
        ) periods
        WHERE s <= v_at AND v_at < e;
        IF v_end IS NULL THEN
            EXIT;
        END IF;
        v_found := true;
        v_at := v_end;
    END LOOP;
    RETURN CASE WHEN v_found THEN v_at END;
END
$$;
