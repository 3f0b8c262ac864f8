-- api_health.sql — crier.api_health: what GET /healthz and /readyz judge, in one query:
-- seconds the oldest due event has waited for fan-out (crier.api_outbox_lag), seconds the
-- oldest due delivery has waited for an attempt (crier.api_delivery_lag), and how many
-- crier serve workers are alive (crier.worker_state).
CREATE OR REPLACE FUNCTION crier.api_health(OUT outbox_lag double precision, OUT delivery_lag double precision,
                                            OUT workers_alive integer)
LANGUAGE sql STABLE AS $$
    SELECT crier.api_outbox_lag(), crier.api_delivery_lag(),
           (SELECT count(*)::integer FROM crier.rules_status
            WHERE crier.worker_state(heartbeat_at, heartbeat_interval, stopped_at) = 'alive')
$$;
