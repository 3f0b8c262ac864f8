-- metrics_fanout.sql — crier.metrics_fanout: what one fan-out batch wrote, for
-- GET /metrics, added in the batch's own write statement (src/engine/fanout.c):
-- crier_notifications_created_total, crier_events_fanned_out_total (one per
-- element of p_latency) with the histogram crier_fanout_latency_seconds
-- (commit -> fan-out), crier_events_quarantined_total, and feed items
-- suppressed by a preference (suppressed deliveries of the other channels are
-- rows, counted by crier.metrics_delivery_state). Returns 0.
CREATE OR REPLACE FUNCTION crier.metrics_fanout(p_created bigint, p_quarantined bigint,
                                                p_latency double precision[], p_feed_suppressed bigint)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    PERFORM crier.metric_add(
        ARRAY['crier_notifications_created_total', 'crier_events_fanned_out_total', 'crier_events_quarantined_total',
              'crier_notifications_suppressed_total'],
        ARRAY['', '', '', 'channel'], ARRAY['', '', '', 'feed'], ARRAY['', '', '', 'reason'],
        ARRAY['', '', '', 'preference'],
        ARRAY[p_created, coalesce(cardinality(p_latency), 0), p_quarantined, p_feed_suppressed]::double precision[]);
    IF cardinality(p_latency) > 0 THEN
        PERFORM crier.metric_observe('crier_fanout_latency_seconds', '', NULL, p_latency);
    END IF;
    RETURN 0;
END
$$;
