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
    SELECT 'crier_rules_info', 'worker', r.worker, 'version', r.version, 1 FROM crier.rules_status r
    UNION ALL
    SELECT 'crier_rules_reloads_total', 'worker', r.worker, 'result', 'ok', r.reloads_ok FROM crier.rules_status r
    UNION ALL
    SELECT 'crier_rules_reloads_total', 'worker', r.worker, 'result', 'failed', r.reloads_failed
        FROM crier.rules_status r
    UNION ALL
    SELECT 'crier_rules_last_reload_failed', 'worker', r.worker, NULL, NULL,
        CASE WHEN r.last_error IS NULL THEN 0 ELSE 1 END FROM crier.rules_status r
$$;
