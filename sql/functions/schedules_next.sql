-- schedules_next.sql — crier.schedules_next: when the daemon whose rules declare p_defs
-- (crier.fire_schedules's argument) next has schedule work: the earliest next occurrence of
-- its schedules (not before a failed one's retry_after; for a row whose cron or zone differ,
-- this definition's next occurrence after the last one handled), now when one is not
-- registered yet; NULL when there is nothing to wait for. The timer worker sleeps until the
-- earlier of this and its nearest timer.
CREATE OR REPLACE FUNCTION crier.schedules_next(p_defs jsonb) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT min(CASE WHEN sc.name IS NULL THEN now()
                    WHEN sc.cron <> x.cron OR sc.time_zone <> x.time_zone THEN
                        (SELECT CASE WHEN q.n IS NOT NULL THEN greatest(q.n, sc.retry_after) END
                         FROM (SELECT crier.cron_next_or_null(x.cron, x.time_zone,
                                                              coalesce(sc.last_occurrence, sc.created_at)) AS n) q)
                    WHEN sc.next_occurrence IS NULL THEN NULL -- (none: greatest would take retry_after)
                    ELSE greatest(sc.next_occurrence, sc.retry_after) END)
    FROM jsonb_to_recordset(CASE WHEN jsonb_typeof(p_defs) = 'array' THEN p_defs ELSE '[]' END)
         AS x(name text, cron text, time_zone text, tenants jsonb)
    CROSS JOIN LATERAL jsonb_array_elements_text(x.tenants) AS t(tenant)
    LEFT JOIN crier.schedules sc ON sc.name = x.name AND sc.tenant = t.tenant
$$;
