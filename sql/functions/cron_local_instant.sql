-- cron_local_instant.sql — crier.cron_local_instant: the instant of a local wall-clock time in
-- a time zone, for schedule occurrences: a local time that does not exist that day (the clocks
-- jump over it) is the next valid instant (the jump: 02:30 in Europe/Berlin on the last
-- Sunday of March is 03:00 CEST); a local time that occurs twice (the clocks go back) is its
-- first instant (02:30 on the last Sunday of October is 02:30 CEST, not CET).
CREATE OR REPLACE FUNCTION crier.cron_local_instant(p_local timestamp, p_zone text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v timestamptz := p_local AT TIME ZONE p_zone;
    v_cand timestamp;
    v_back interval;
BEGIN
    IF (v AT TIME ZONE p_zone) <> p_local THEN
        -- in a gap: the first local minute after it that exists is the jump's instant
        FOR k IN 1..1440 LOOP
            v_cand := date_trunc('minute', p_local) + make_interval(mins => k);
            IF ((v_cand AT TIME ZONE p_zone) AT TIME ZONE p_zone) = v_cand THEN
                RETURN v_cand AT TIME ZONE p_zone;
            END IF;
        END LOOP;
        RETURN v;
    END IF;
    -- twice: the earlier instant (shifts of 30 minutes to 2 hours exist)
    FOREACH v_back IN ARRAY ARRAY[interval '2 hours', interval '1 hour', interval '30 minutes'] LOOP
        IF ((v - v_back) AT TIME ZONE p_zone) = p_local THEN
            RETURN v - v_back;
        END IF;
    END LOOP;
    RETURN v;
END
$$;
