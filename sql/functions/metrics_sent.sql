-- metrics_sent.sql — crier.metrics_sent: what one crier.complete_deliveries call
-- applied, counted set-wise (parallel arrays, one element per applied result):
-- crier_deliveries_total{channel, outcome="delivered"|"retried"}, the
-- histogram crier_send_duration_seconds{channel} (every applied attempt that
-- was sent, not the released ones) and crier_delivery_latency_seconds{channel}
-- (commit -> delivered: now() minus the event's commit time, which the
-- delivery carries: deliveries.emitted_at, sql/025). Dead deliveries are
-- counted by crier.metrics_delivery_state.
--
-- One INSERT, as crier.metrics_fanout (histogram buckets by crier.metric_le): through
-- crier.metric_add and a histogram function it took three nested calls and five statements,
-- 0.9 ms of a batch of 200 results (4.5 µs per delivery; docs/BENCHMARKS.md, bench deliver,
-- fourteenth session).
-- PL/pgSQL, not LANGUAGE sql: a SQL function that cannot be inlined is parsed and planned
-- again on every call (its plan lives only as long as the calling statement), and this one runs
-- in every batch of the fan-out or of the delivery results; PL/pgSQL keeps its plans for the
-- session (docs/BENCHMARKS.md, "Plans kept for the session").
DROP FUNCTION IF EXISTS crier.metrics_sent(text[], text[], double precision[], bigint[], timestamptz[]);
CREATE OR REPLACE FUNCTION crier.metrics_sent(p_channel text[], p_outcome text[], p_duration_ms double precision[],
                                              p_emitted timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO crier.metric_counters AS c (metric, label1, value1, label2, value2, shard, value)
    SELECT a.m, 'channel', a.channel, a.l2, a.v2, pg_backend_pid(), a.n
    FROM (
        WITH x AS (
            SELECT * FROM unnest(p_channel, p_outcome, p_duration_ms, p_emitted) AS x(c, o, ms, emitted)
        ), h AS (
            SELECT 'crier_send_duration_seconds' AS m, x.c, x.ms / 1000.0 AS s
            FROM x WHERE x.o <> 'released' AND x.ms IS NOT NULL
            UNION ALL
            SELECT 'crier_delivery_latency_seconds', x.c, extract(epoch FROM now() - x.emitted)::double precision
            FROM x WHERE x.o = 'delivered' AND x.emitted IS NOT NULL
        ), b AS (
            -- Grouped before they are spread into samples: one row per bucket, not per result.
            SELECT h.m, h.c, crier.metric_le(h.s) AS le, count(*)::double precision AS n, sum(h.s) AS s
            FROM h GROUP BY h.m, h.c, crier.metric_le(h.s)
        )
        -- Each (metric, channel, label) comes once: the groups above make the rows distinct.
        SELECT 'crier_deliveries_total' AS m, x.c AS channel, 'outcome' AS l2,
               CASE x.o WHEN 'retry' THEN 'retried' ELSE x.o END AS v2, count(*)::double precision AS n
        FROM x WHERE x.o IN ('delivered', 'retry') GROUP BY x.c, x.o
        UNION ALL SELECT b.m || '_bucket', b.c, 'le', b.le, b.n FROM b
        UNION ALL SELECT b.m || '_sum', b.c, '', '', sum(b.s) FROM b GROUP BY b.m, b.c
        UNION ALL SELECT b.m || '_count', b.c, '', '', sum(b.n) FROM b GROUP BY b.m, b.c
    ) AS a
    WHERE a.n <> 0
    ORDER BY a.m, a.channel, a.l2, a.v2
    ON CONFLICT (metric, label1, value1, label2, value2, shard) DO UPDATE SET value = c.value + EXCLUDED.value;
END
$$;
