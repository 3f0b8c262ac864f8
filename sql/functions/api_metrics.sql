-- api_metrics.sql — crier.api_metrics: the gauges of GET /metrics, one row per sample (at
-- most two labels). No tenant appears in any label. Counted from partial indexes only
-- (pending, dead, paused rows); terminal delivered rows are not counted (that would scan
-- the whole table on every scrape).
CREATE OR REPLACE FUNCTION crier.api_metrics()
RETURNS TABLE (metric text, label1 text, value1 text, label2 text, value2 text, value double precision)
LANGUAGE sql STABLE AS $$
    SELECT 'crier_events', 'state', 'pending', NULL, NULL, count(*)::double precision
        FROM crier.events WHERE state = 'pending'
    UNION ALL
    SELECT 'crier_events', 'state', 'dead', NULL, NULL, count(*) FROM crier.events WHERE state = 'dead'
    UNION ALL
    SELECT 'crier_outbox_oldest_pending_seconds', NULL, NULL, NULL, NULL, crier.api_outbox_lag()
    UNION ALL
    SELECT 'crier_deliveries', 'state', s.state, NULL, NULL, coalesce(c.n, 0)
        FROM unnest(ARRAY['pending', 'sending', 'paused', 'dead']) AS s(state)
        LEFT JOIN (SELECT d.state, count(*)::double precision AS n FROM crier.deliveries d
                   WHERE d.state IN ('pending', 'sending') GROUP BY d.state
                   UNION ALL
                   SELECT 'paused', count(*) FROM crier.deliveries d WHERE d.state = 'paused'
                   UNION ALL
                   SELECT 'dead', count(*) FROM crier.deliveries d WHERE d.state = 'dead') c USING (state)
    UNION ALL
    SELECT 'crier_deliveries_oldest_due_seconds', NULL, NULL, NULL, NULL,
        coalesce(extract(epoch FROM now() - min(due_at))::double precision, 0)
        FROM crier.deliveries WHERE state = 'pending' AND due_at <= now()
    UNION ALL
    SELECT 'crier_endpoints', 'state', s.state, NULL, NULL,
        (SELECT count(*) FROM crier.endpoints e WHERE e.state = s.state)::double precision
        FROM unnest(ARRAY['paused', 'disabled']) AS s(state)
    UNION ALL
    SELECT 'crier_workers', 'state', s.state, NULL, NULL,
        (SELECT count(*) FROM crier.rules_status r
         WHERE crier.worker_state(r.heartbeat_at, r.heartbeat_interval, r.stopped_at) = s.state)::double precision
        FROM unnest(ARRAY['alive', 'dead', 'stopped']) AS s(state)
    UNION ALL
    -- per-worker series: alive workers only, so a dead or stopped worker's series disappear
    SELECT m.metric, 'worker', r.worker, m.label2, m.value2, m.value
        FROM crier.rules_status r
        CROSS JOIN LATERAL (VALUES
            ('crier_worker_heartbeat_age_seconds', NULL, NULL,
             extract(epoch FROM now() - r.heartbeat_at)::double precision),
            ('crier_worker_events_in_flight', NULL, NULL, r.events_in_flight::double precision),
            ('crier_worker_deliveries_in_flight', NULL, NULL, r.deliveries_in_flight::double precision),
            ('crier_rules_info', 'version', r.version, 1::double precision),
            ('crier_rules_reloads_total', 'result', 'ok', r.reloads_ok::double precision),
            ('crier_rules_reloads_total', 'result', 'failed', r.reloads_failed::double precision),
            ('crier_rules_last_reload_failed', NULL, NULL,
             CASE WHEN r.last_error IS NULL THEN 0 ELSE 1 END::double precision)
        ) AS m(metric, label2, value2, value)
        WHERE crier.worker_state(r.heartbeat_at, r.heartbeat_interval, r.stopped_at) = 'alive'
$$;
