-- metric_observe.sql — crier.metric_observe: adds observations (seconds) to the
-- histogram p_metric, one observation per element of p_seconds (NULLs skipped),
-- labelled p_label = the matching element of p_value (p_label '': no label). It
-- adds to the bucket each observation falls in (the smallest bound >= it, else
-- +Inf), to _sum and to _count; the scrape (crier.api_metrics) makes the
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
        WITH bounds AS (
            SELECT crier.metric_buckets() AS b,
                   ARRAY(SELECT -u FROM unnest(crier.metric_buckets()) WITH ORDINALITY AS t(u, i) ORDER BY i DESC) AS nb
        ),
        o AS (
            -- the bucket: width_bucket over the negated, reversed bounds counts how
            -- many bounds are >= s, so equality falls in the bucket "le" = s
            SELECT x.v, x.s,
                   cardinality(bounds.b) + 1 - width_bucket(-x.s, bounds.nb) AS k
            FROM unnest(p_value, p_seconds) AS x(v, s), bounds
            WHERE x.s IS NOT NULL
        )
        SELECT p_metric || '_bucket' AS m, o.v,
               'le' AS l2, coalesce((SELECT b[o.k] FROM bounds)::text, '+Inf') AS le, count(*)::double precision AS n
        FROM o GROUP BY o.v, o.k
        UNION ALL SELECT p_metric || '_sum', o.v, '', '', sum(o.s) FROM o GROUP BY o.v
        UNION ALL SELECT p_metric || '_count', o.v, '', '', count(*) FROM o GROUP BY o.v
    ) AS samples
    HAVING count(*) > 0;
END
$$;
