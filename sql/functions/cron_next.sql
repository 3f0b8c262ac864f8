-- cron_next.sql — crier.cron_next: the first occurrence of a cron expression (crier.cron_parse's
-- grammar) strictly after p_after, with the wall clock of the time zone p_zone (a name of
-- PostgreSQL's tz database, pg_timezone_names), as an instant. Across clock changes: a local
-- time the clocks skip fires at the jump, a local time that occurs twice fires once, at its
-- first instant (crier.cron_local_instant); occurrences that land on one instant are one.
-- NULL when there is none within 8 years. One implementation for the daemon's schedules
-- (crier.fire_schedules) and crier status.
CREATE OR REPLACE FUNCTION crier.cron_next(p_expr text, p_zone text, p_after timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    c record;
    v_local timestamp;
    d date;
    h int;
    mi int;
    s int;
    v_cand timestamp;
    v_at timestamptz;
BEGIN
    IF p_after IS NULL OR NOT isfinite(p_after) THEN
        RAISE EXCEPTION 'crier.cron_next: after must be a finite time' USING ERRCODE = '22023';
    END IF;
    c := crier.cron_parse(p_expr);
    v_local := p_after AT TIME ZONE p_zone;
    FOR i IN 0..(366 * 8) LOOP
        d := v_local::date + i;
        CONTINUE WHEN NOT extract(month FROM d)::int = ANY(c.months);
        IF c.dom_star OR c.dow_star THEN
            CONTINUE WHEN NOT (extract(day FROM d)::int = ANY(c.doms) AND extract(dow FROM d)::int = ANY(c.dows));
        ELSE
            CONTINUE WHEN NOT (extract(day FROM d)::int = ANY(c.doms) OR extract(dow FROM d)::int = ANY(c.dows));
        END IF;
        FOREACH h IN ARRAY c.hours LOOP
            CONTINUE WHEN d + make_interval(hours => h + 1) <= v_local;
            FOREACH mi IN ARRAY c.minutes LOOP
                CONTINUE WHEN d + make_interval(hours => h, mins => mi + 1) <= v_local;
                FOREACH s IN ARRAY c.seconds LOOP
                    v_cand := d + make_interval(hours => h, mins => mi, secs => s);
                    CONTINUE WHEN v_cand <= v_local;
                    v_at := crier.cron_local_instant(v_cand, p_zone);
                    IF v_at > p_after THEN
                        RETURN v_at;
                    END IF;
                END LOOP;
            END LOOP;
        END LOOP;
    END LOOP;
    RETURN NULL;
END
$$;
