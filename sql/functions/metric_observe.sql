-- metric_observe.sql — crier.metric_observe: adds observations (seconds) to the
-- histogram p_metric, one observation per element of p_seconds (NULLs skipped),
-- labelled p_label = the matching element of p_value (p_label '': no label). It
-- adds to the bucket each observation falls in (crier.metric_le: the smallest
-- bound >= it, else +Inf), to _sum and to _count; the scrape (crier.api_metrics) makes the
-- buckets cumulative.
-- PL/pgSQL, not LANGUAGE sql: a SQL function that cannot be inlined is parsed and planned
-- again on every call (its plan lives only as long as the calling statement), and this one runs
-- in every batch of the fan-out or of the delivery results; PL/pgSQL keeps its plans for the
-- session (docs/BENCHMARKS.md, "Plans kept for the session").
CREATE OR REPLACE FUNCTION crier.metric_observe(p_metric text, p_label text, p_value text[],
                                                p_seconds double precision[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM crier.metric_add(array_agg(m), array_agg(CASE WHEN p_label = '' THEN '' ELSE p_label END),
                             array_agg(CASE WHEN p_label = '' THEN '' ELSE coalesce(v, '') END),
                             array_agg(l2), array_agg(le), array_agg(n))
    FROM (
        WITH o AS (
            SELECT x.v, x.s, crier.metric_le(x.s) AS le
            FROM unnest(p_value, p_seconds) AS x(v, s)
            WHERE x.s IS NOT NULL
        )
        SELECT p_metric || '_bucket' AS m, o.v, 'le' AS l2, o.le, count(*)::double precision AS n
        FROM o GROUP BY o.v, o.le
        UNION ALL SELECT p_metric || '_sum', o.v, '', '', sum(o.s) FROM o GROUP BY o.v
        UNION ALL SELECT p_metric || '_count', o.v, '', '', count(*) FROM o GROUP BY o.v
    ) AS samples
    HAVING count(*) > 0;
END
$$;
