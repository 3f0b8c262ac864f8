-- api_metrics.sql — crier.api_metrics: the samples of GET /metrics that come from the
-- database, one row per sample (at most two labels; ord orders the samples of
-- one metric: a histogram's buckets by bound). No tenant appears in any label.
-- Gauges are counted from partial indexes only (pending, dead, paused rows; a
-- count of terminal rows would scan whole tables on every scrape); counters and
-- histograms are the sums of crier.metric_counters' shards (sql/022_metrics.sql),
-- a histogram's buckets made cumulative here; crier_events_accepted_total is
-- computed (fanned out + quarantined - replayed + waiting), so crier.emit
-- counts nothing.
DROP FUNCTION IF EXISTS crier.api_metrics();
CREATE OR REPLACE FUNCTION crier.api_metrics()
RETURNS TABLE (metric text, label1 text, value1 text, label2 text, value2 text, value double precision, ord text)
LANGUAGE sql STABLE AS $$
WITH counters AS (
    SELECT c.metric, c.label1, c.value1, c.label2, c.value2, sum(c.value) AS value
    FROM crier.metric_counters c GROUP BY 1, 2, 3, 4, 5
), bounds AS (
    SELECT i, coalesce(b::text, '+Inf') AS le
    FROM unnest(crier.metric_buckets() || NULL::double precision) WITH ORDINALITY AS t(b, i)
), series AS (
    SELECT DISTINCT c.metric, c.label1, c.value1 FROM counters c WHERE c.metric LIKE '%\_bucket'
), waiting AS (
    -- waiting for fan-out, or for their time (scheduled sends: one pending send timer each)
    SELECT (SELECT count(*) FROM crier.events WHERE state = 'pending')::double precision
         + (SELECT count(*) FROM crier.timers WHERE state = 'pending' AND kind = 'send') AS n
)
    SELECT 'crier_events', 'state', 'pending', NULL, NULL, (SELECT n FROM waiting), ''
    UNION ALL
    SELECT 'crier_events', 'state', 'dead', NULL, NULL, count(*), '' FROM crier.events WHERE state = 'dead'
    UNION ALL
    SELECT 'crier_outbox_oldest_pending_seconds', NULL, NULL, NULL, NULL, crier.api_outbox_lag(), ''
    UNION ALL
    SELECT 'crier_deliveries', 'state', s.state, NULL, NULL, coalesce(c.n, 0), s.state
        FROM unnest(ARRAY['pending', 'sending', 'paused', 'dead']) AS s(state)
        LEFT JOIN (SELECT crier.delivery_state(d.state, d.lease_until) AS state, count(*)::double precision AS n
                   FROM crier.deliveries d WHERE d.state = 'pending' GROUP BY 1
                   UNION ALL
                   SELECT 'paused', count(*) FROM crier.deliveries d WHERE d.state = 'paused'
                   UNION ALL
                   SELECT 'dead', count(*) FROM crier.deliveries d WHERE d.state = 'dead') c USING (state)
    UNION ALL
    SELECT 'crier_deliveries_oldest_due_seconds', NULL, NULL, NULL, NULL, crier.api_delivery_lag(), ''
    UNION ALL
    SELECT 'crier_endpoints', 'state', s.state, NULL, NULL,
        (SELECT count(*) FROM crier.endpoints e WHERE e.state = s.state)::double precision, s.state
        FROM unnest(ARRAY['paused', 'disabled']) AS s(state)
    UNION ALL
    SELECT 'crier_workers', 'state', s.state, NULL, NULL,
        (SELECT count(*) FROM crier.rules_status r
         WHERE crier.worker_state(r.heartbeat_at, r.heartbeat_interval, r.stopped_at) = s.state)::double precision,
        s.state
        FROM unnest(ARRAY['alive', 'dead', 'stopped']) AS s(state)
    UNION ALL
    -- per-worker series: alive workers only, so a dead or stopped worker's series disappear
    SELECT m.metric, 'worker', r.worker, m.label2, m.value2, m.value, r.worker || ' ' || coalesce(m.value2, '')
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
    UNION ALL
    SELECT 'crier_timers_pending', 'kind', k.kind, NULL, NULL,
        (SELECT count(*) FROM crier.timers t WHERE t.state = 'pending' AND t.kind = k.kind)::double precision, ''
        FROM unnest(ARRAY['delay', 'digest', 'send']) AS k(kind)
    UNION ALL
    SELECT 'crier_timers_oldest_overdue_seconds', NULL, NULL, NULL, NULL,
        coalesce(extract(epoch FROM now() - min(t.due_at))::double precision, 0), ''
        FROM crier.timers t WHERE t.state = 'pending' AND t.due_at <= now()
    UNION ALL
    -- counters (every family present from the start, at 0, so rate() works at once)
    SELECT z.metric, NULL, NULL, NULL, NULL, coalesce((SELECT sum(c.value) FROM counters c WHERE c.metric = z.metric), 0), ''
        FROM unnest(ARRAY['crier_events_fanned_out_total', 'crier_events_quarantined_total',
                          'crier_events_replayed_total', 'crier_notifications_created_total',
                          'crier_deliveries_replayed_total']) AS z(metric)
    UNION ALL
    SELECT 'crier_events_accepted_total', NULL, NULL, NULL, NULL,
        coalesce((SELECT sum(CASE c.metric WHEN 'crier_events_replayed_total' THEN -c.value ELSE c.value END)
                  FROM counters c WHERE c.metric IN ('crier_events_fanned_out_total', 'crier_events_quarantined_total',
                                                     'crier_events_replayed_total')), 0)
        + (SELECT n FROM waiting), ''
    UNION ALL
    -- labelled counters, a histogram's _sum and _count
    SELECT c.metric, nullif(c.label1, ''), nullif(c.value1, ''), nullif(c.label2, ''), nullif(c.value2, ''),
           c.value, c.value1 || ' ' || c.value2
        FROM counters c
        WHERE c.metric NOT LIKE '%\_bucket' AND (c.label1 <> '' OR c.metric LIKE '%\_sum' OR c.metric LIKE '%\_count')
    UNION ALL
    -- a histogram's buckets, cumulative, every bound of every series
    SELECT s.metric, CASE WHEN s.label1 = '' THEN 'le' ELSE s.label1 END,
           CASE WHEN s.label1 = '' THEN b.le ELSE s.value1 END,
           CASE WHEN s.label1 = '' THEN NULL ELSE 'le' END, CASE WHEN s.label1 = '' THEN NULL ELSE b.le END,
           sum(coalesce(c.value, 0)) OVER (PARTITION BY s.metric, s.label1, s.value1 ORDER BY b.i),
           s.value1 || ' ' || to_char(b.i, 'FM000')
        FROM series s CROSS JOIN bounds b
        LEFT JOIN counters c ON c.metric = s.metric AND c.label1 = s.label1 AND c.value1 = s.value1
                            AND c.label2 = 'le' AND c.value2 = b.le
$$;
