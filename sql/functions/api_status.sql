-- api_status.sql — crier.api_status: everything the operator's status page (GET /status.json)
-- shows, as one JSON document, over every tenant: the crier serve workers (crier.worker_state,
-- heartbeat age, rules version, work in flight), the outbox and delivery lag
-- (crier.api_health), rows waiting or dead, events fanned out and deliveries delivered or dead
-- per minute over the last p_minutes minutes with their latency, failing endpoints, the newest
-- dead letters (crier.dead_letters) and a per-tenant breakdown.
--
-- Cost per call is bounded, whatever the tables' size: counts of waiting and dead rows come
-- from partial indexes; the per-minute series look only at the newest p_window rows of
-- crier.events and crier.deliveries by id (a primary-key range), since processed_at and
-- delivered_at have no index (one would slow every update of the hot path). A row finished in
-- the last minutes but older than that window is not counted.
CREATE OR REPLACE FUNCTION crier.api_status(p_minutes integer DEFAULT 15, p_window bigint DEFAULT 200000,
                                            p_dead_limit integer DEFAULT 20)
RETURNS json LANGUAGE sql STABLE AS $$
    WITH since AS (
        SELECT date_trunc('minute', now()) - make_interval(mins => p_minutes - 1) AS t
    ), recent_events AS (
        SELECT e.tenant, e.state, e.created_at, e.processed_at
        FROM crier.events e
        WHERE e.id > (SELECT coalesce(max(id), 0) - p_window FROM crier.events)
          AND e.processed_at >= (SELECT t FROM since)
    ), recent_deliveries AS (
        SELECT d.tenant, d.state, d.created_at, d.delivered_at, d.dead_at,
               coalesce(d.delivered_at, d.dead_at) AS finished_at
        FROM crier.deliveries d
        WHERE d.id > (SELECT coalesce(max(id), 0) - p_window FROM crier.deliveries)
          AND coalesce(d.delivered_at, d.dead_at) >= (SELECT t FROM since)
    ), minutes AS (
        SELECT generate_series((SELECT t FROM since), date_trunc('minute', now()), interval '1 minute') AS m
    ), waiting AS (
        SELECT tenant, 'events_pending' AS what, count(*) AS n FROM crier.events WHERE state = 'pending'
            GROUP BY tenant
        UNION ALL
        SELECT tenant, 'events_dead', count(*) FROM crier.events WHERE state = 'dead' GROUP BY tenant
        UNION ALL
        SELECT tenant, 'deliveries_' || crier.delivery_state(state, lease_until), count(*) FROM crier.deliveries
            WHERE state = 'pending' GROUP BY 1, 2
        UNION ALL
        SELECT tenant, 'deliveries_paused', count(*) FROM crier.deliveries WHERE state = 'paused' GROUP BY tenant
        UNION ALL
        SELECT tenant, 'deliveries_dead', count(*) FROM crier.deliveries WHERE state = 'dead' GROUP BY tenant
        UNION ALL
        SELECT tenant, 'events_done_recent', count(*) FROM recent_events WHERE state = 'done' GROUP BY tenant
        UNION ALL
        SELECT tenant, 'deliveries_delivered_recent', count(*) FROM recent_deliveries WHERE state = 'delivered'
            GROUP BY tenant
        UNION ALL
        SELECT tenant, 'endpoints_failing', count(*) FROM crier.endpoints WHERE state <> 'active' GROUP BY tenant
    )
    SELECT json_build_object(
        'now', now(),
        'minutes', p_minutes,
        'window_rows', p_window,
        'health', (SELECT json_build_object('outbox_lag_seconds', round(h.outbox_lag::numeric, 3),
                                            'delivery_lag_seconds', round(h.delivery_lag::numeric, 3),
                                            'workers_alive', h.workers_alive)
                   FROM crier.api_health() h),
        'totals', (SELECT coalesce(json_object_agg(what, n), '{}') FROM
                       (SELECT what, sum(n) AS n FROM waiting GROUP BY what) t),
        'workers', (SELECT coalesce(json_agg(json_build_object(
                        'worker', r.worker,
                        'state', crier.worker_state(r.heartbeat_at, r.heartbeat_interval, r.stopped_at),
                        'rules_version', r.version,
                        'rules_loaded_at', r.loaded_at,
                        'reloads_ok', r.reloads_ok, 'reloads_failed', r.reloads_failed,
                        'last_reload_error', r.last_error,
                        'started_at', r.started_at,
                        'heartbeat_age_seconds',
                            round(extract(epoch FROM now() - coalesce(r.heartbeat_at, r.updated_at))::numeric, 1),
                        'heartbeat_interval_seconds', r.heartbeat_interval,
                        'stopped_at', r.stopped_at,
                        'events_in_flight', r.events_in_flight,
                        'deliveries_in_flight', r.deliveries_in_flight,
                        'events_fanned_out', r.events_fanned_out,
                        'deliveries_claimed', r.deliveries_claimed)
                        ORDER BY crier.worker_state(r.heartbeat_at, r.heartbeat_interval, r.stopped_at),
                                 r.updated_at DESC), '[]')
                    FROM crier.rules_status r),
        'series', (SELECT json_agg(json_build_object(
                        'minute', mi.m,
                        'events_fanned_out', (SELECT count(*) FROM recent_events e
                                              WHERE e.state = 'done' AND date_trunc('minute', e.processed_at) = mi.m),
                        'deliveries_delivered', (SELECT count(*) FROM recent_deliveries d
                                                 WHERE d.state = 'delivered'
                                                   AND date_trunc('minute', d.delivered_at) = mi.m),
                        'deliveries_dead', (SELECT count(*) FROM recent_deliveries d
                                            WHERE d.state = 'dead' AND date_trunc('minute', d.dead_at) = mi.m),
                        'fanout_p95_ms', (SELECT round((percentile_cont(0.95) WITHIN GROUP
                                              (ORDER BY extract(epoch FROM e.processed_at - e.created_at)) * 1000)::numeric, 1)
                                          FROM recent_events e
                                          WHERE e.state = 'done' AND date_trunc('minute', e.processed_at) = mi.m),
                        'delivery_p95_ms', (SELECT round((percentile_cont(0.95) WITHIN GROUP
                                                (ORDER BY extract(epoch FROM d.delivered_at - d.created_at)) * 1000)::numeric, 1)
                                            FROM recent_deliveries d
                                            WHERE d.state = 'delivered' AND date_trunc('minute', d.delivered_at) = mi.m))
                        ORDER BY mi.m)
                   FROM minutes mi),
        'endpoints', (SELECT coalesce(json_agg(json_build_object(
                          'tenant', e.tenant, 'channel', e.channel, 'target', e.target, 'state', e.state,
                          'consecutive_failures', e.consecutive_failures, 'failing_since', e.failing_since,
                          'next_probe_at', e.next_probe_at, 'disabled_at', e.disabled_at,
                          'last_status', e.last_status, 'last_error', left(e.last_error, 300))
                          ORDER BY e.updated_at DESC), '[]')
                      FROM (SELECT * FROM crier.endpoints WHERE state <> 'active'
                            ORDER BY updated_at DESC LIMIT 50) e),
        'dead_letters', (SELECT coalesce(json_agg(json_build_object(
                             'kind', x.kind, 'id', x.id, 'tenant', x.tenant, 'event_id', x.event_id,
                             'type', x.event_type, 'entity_id', x.entity_id, 'recipient', x.recipient,
                             'channel', x.channel, 'target', x.target, 'attempts', x.attempts,
                             'died_at', x.died_at, 'last_status', x.last_status,
                             'last_error', left(x.last_error, 300))
                             ORDER BY x.sort_us DESC, x.kind_rank DESC, x.id DESC), '[]')
                         FROM (SELECT * FROM crier.dead_letters(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) d
                               ORDER BY d.sort_us DESC, d.kind_rank DESC, d.id DESC LIMIT p_dead_limit) x),
        'tenants', (SELECT coalesce(json_agg(jsonb_build_object('tenant', t.tenant) || t.counts
                        ORDER BY t.total DESC, t.tenant), '[]')
                    FROM (SELECT tenant, json_object_agg(what, n)::jsonb AS counts, sum(n) AS total
                          FROM waiting GROUP BY tenant ORDER BY sum(n) DESC, tenant LIMIT 50) t)
    )
$$;
