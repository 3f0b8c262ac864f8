-- metrics_sent.sql — crier.metrics_sent: what one crier.complete_deliveries call
-- applied, counted set-wise (parallel arrays, one element per applied result):
-- crier_deliveries_total{channel, outcome="delivered"|"retried"}, the
-- histogram crier_send_duration_seconds{channel} (every applied attempt that
-- was sent, not the released ones) and crier_delivery_latency_seconds{channel}
-- (commit -> delivered: now() minus the event's commit time, which the
-- delivery carries (deliveries.emitted_at, sql/025); for a row without it, the
-- event's created_at through its notification, or the delivery's own
-- created_at once retention removed the event). Dead deliveries are counted by
-- crier.metrics_delivery_state.
-- PL/pgSQL, not LANGUAGE sql: a SQL function that cannot be inlined is parsed and planned
-- again on every call (its plan lives only as long as the calling statement), and this one runs
-- in every batch of the fan-out or of the delivery results; PL/pgSQL keeps its plans for the
-- session (docs/BENCHMARKS.md, "Plans kept for the session").
DROP FUNCTION IF EXISTS crier.metrics_sent(text[], text[], double precision[], bigint[], timestamptz[]);
CREATE OR REPLACE FUNCTION crier.metrics_sent(p_channel text[], p_outcome text[], p_duration_ms double precision[],
                                              p_emitted timestamptz[], p_notification bigint[],
                                              p_created timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM crier.metric_add(array_agg('crier_deliveries_total'::text), array_agg('channel'::text), array_agg(c),
                             array_agg('outcome'::text), array_agg(CASE o WHEN 'retry' THEN 'retried' ELSE o END),
                             array_agg(n))
    FROM (SELECT c, o, count(*)::double precision AS n
          FROM unnest(p_channel, p_outcome) AS x(c, o) WHERE o IN ('delivered', 'retry') GROUP BY c, o) s
    HAVING count(*) > 0;
    PERFORM crier.metric_observe('crier_send_duration_seconds', 'channel', array_agg(c), array_agg(ms / 1000.0))
    FROM unnest(p_channel, p_outcome, p_duration_ms) AS x(c, o, ms)
    WHERE o <> 'released'
    HAVING count(*) > 0;
    -- The lookup runs only for rows without emitted_at (coalesce stops at the first value).
    PERFORM crier.metric_observe('crier_delivery_latency_seconds', 'channel', array_agg(x.c),
                                 array_agg(extract(epoch FROM now() - coalesce(
                                     x.emitted,
                                     (SELECT e.created_at FROM crier.notifications n
                                      JOIN crier.events e ON e.id = n.event_id WHERE n.id = x.nid),
                                     x.created))::double precision))
    FROM unnest(p_channel, p_outcome, p_emitted, p_notification, p_created) AS x(c, o, emitted, nid, created)
    WHERE x.o = 'delivered'
    HAVING count(*) > 0;
END
$$;
