-- cron_next_or_null.sql — crier.cron_next_or_null: crier.cron_next, or NULL where it raises (a
-- bad expression or an unknown zone): for crier.schedules_next, whose caller must get an
-- answer whatever one schedule's definition is (crier.fire_schedules records the error).
CREATE OR REPLACE FUNCTION crier.cron_next_or_null(p_expr text, p_zone text, p_after timestamptz)
RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN crier.cron_next(p_expr, p_zone, p_after);
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END
$$;
