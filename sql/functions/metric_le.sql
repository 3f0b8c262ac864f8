-- metric_le.sql — crier.metric_le: the bucket label "le" of one histogram observation
-- (seconds): the smallest bound of crier.metric_buckets() that is >= it, as text, or '+Inf'
-- above the last bound (equality falls in the bucket le = the bound). The one rule of
-- crier.metrics_sent and crier.metrics_fanout. One expression, no FROM and no subquery,
-- so that PostgreSQL inlines it into the calling statement (width_bucket counts the bounds
-- <= s; the bucket is that bound when it equals s, else the next one).
CREATE OR REPLACE FUNCTION crier.metric_le(p_seconds double precision)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(CASE WHEN (crier.metric_buckets())[width_bucket(p_seconds, crier.metric_buckets())] = p_seconds
                         THEN p_seconds
                         ELSE (crier.metric_buckets())[width_bucket(p_seconds, crier.metric_buckets()) + 1]
                    END::text, '+Inf')
$$;
