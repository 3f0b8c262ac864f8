-- metrics_fanout.sql — crier.metrics_fanout: what one fan-out batch wrote, for
-- GET /metrics, added in the batch's own write statement (src/engine/fanout.c):
-- crier_notifications_created_total, crier_events_fanned_out_total (one per
-- element of p_latency) with the histogram crier_fanout_latency_seconds
-- (commit -> fan-out), crier_events_quarantined_total, and feed items
-- suppressed by a preference (suppressed deliveries of the other channels are
-- rows, counted by crier.metrics_delivery_state). Returns 0.
--
-- One INSERT (the latency histogram's buckets by crier.metric_le, as in crier.metrics_sent): through
-- crier.metric_add and a histogram function (since dropped) it took two nested functions and three
-- statements, 0.25-0.48 ms of a batch's 0.7 ms write at 1,500 events/s (batches of four).
CREATE OR REPLACE FUNCTION crier.metrics_fanout(p_created bigint, p_quarantined bigint,
                                                p_latency double precision[], p_feed_suppressed bigint)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO crier.metric_counters AS c (metric, label1, value1, label2, value2, shard, value)
    SELECT a.m, a.l1, a.v1, a.l2, a.v2, pg_backend_pid(), sum(a.n)
    FROM (
        VALUES ('crier_notifications_created_total', '', '', '', '', p_created::double precision),
               ('crier_events_fanned_out_total', '', '', '', '', coalesce(cardinality(p_latency), 0)),
               ('crier_events_quarantined_total', '', '', '', '', p_quarantined),
               ('crier_notifications_suppressed_total', 'channel', 'feed', 'reason', 'preference', p_feed_suppressed)
        UNION ALL
        SELECT 'crier_fanout_latency_seconds_bucket', '', '', 'le', crier.metric_le(x.s), 1
        FROM unnest(p_latency) AS x(s) WHERE x.s IS NOT NULL
        UNION ALL
        SELECT 'crier_fanout_latency_seconds_sum', '', '', '', '', x.s FROM unnest(p_latency) AS x(s) WHERE x.s IS NOT NULL
        UNION ALL
        SELECT 'crier_fanout_latency_seconds_count', '', '', '', '', 1 FROM unnest(p_latency) AS x(s) WHERE x.s IS NOT NULL
    ) AS a(m, l1, v1, l2, v2, n)
    GROUP BY a.m, a.l1, a.v1, a.l2, a.v2
    HAVING sum(a.n) <> 0
    ORDER BY a.m, a.l1, a.v1, a.l2, a.v2
    ON CONFLICT (metric, label1, value1, label2, value2, shard) DO UPDATE SET value = c.value + EXCLUDED.value;
    RETURN 0;
END
$$;
