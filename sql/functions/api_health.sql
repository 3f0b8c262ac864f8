-- api_health.sql — crier.api_health: what GET /healthz and /readyz judge, in one query:
-- seconds the oldest due event has waited for fan-out, seconds the oldest due delivery has
-- waited for an attempt (0 when none waits; one being sent under a lease does not wait), and how many crier serve workers are alive
-- (crier.worker_state).
CREATE OR REPLACE FUNCTION crier.api_health(OUT outbox_lag double precision, OUT delivery_lag double precision,
                                            OUT workers_alive integer)
LANGUAGE sql STABLE AS $$
    SELECT (SELECT coalesce(extract(epoch FROM now() - min(available_at))::double precision, 0)
            FROM crier.events WHERE state = 'pending' AND available_at <= now()),
           (SELECT coalesce(extract(epoch FROM now() - min(due_at))::double precision, 0)
            FROM crier.deliveries WHERE state = 'pending' AND due_at <= now()
              AND (lease_until IS NULL OR lease_until <= now())),
           (SELECT count(*)::integer FROM crier.rules_status
            WHERE crier.worker_state(heartbeat_at, heartbeat_interval, stopped_at) = 'alive')
$$;
