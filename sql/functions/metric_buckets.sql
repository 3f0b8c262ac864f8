-- metric_buckets.sql — crier.metric_buckets: the upper bounds (seconds) of every
-- histogram's buckets in GET /metrics (a last bucket, +Inf, takes the rest).
CREATE OR REPLACE FUNCTION crier.metric_buckets()
RETURNS double precision[] LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800]::double precision[]
$$;
