-- metric_add.sql — crier.metric_add: adds n to counters of crier.metric_counters
-- (parallel arrays, one element per sample; '' for an absent label) in this
-- backend's shard, rows in one order so that two calls in one transaction
-- never lock in opposite orders.
-- PL/pgSQL, not LANGUAGE sql: a SQL function that cannot be inlined is parsed and planned
-- again on every call (its plan lives only as long as the calling statement), and this one runs
-- in every batch of the fan-out or of the delivery results; PL/pgSQL keeps its plans for the
-- session (docs/BENCHMARKS.md, "Plans kept for the session").
CREATE OR REPLACE FUNCTION crier.metric_add(p_metric text[], p_label1 text[], p_value1 text[], p_label2 text[],
                                            p_value2 text[], p_n double precision[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO crier.metric_counters AS c (metric, label1, value1, label2, value2, shard, value)
    SELECT m, l1, v1, l2, v2, pg_backend_pid(), sum(n)
    FROM unnest(p_metric, p_label1, p_value1, p_label2, p_value2, p_n) AS a(m, l1, v1, l2, v2, n)
    WHERE n <> 0
    GROUP BY m, l1, v1, l2, v2
    ORDER BY m, l1, v1, l2, v2
    ON CONFLICT (metric, label1, value1, label2, value2, shard) DO UPDATE SET value = c.value + EXCLUDED.value;
END
$$;
