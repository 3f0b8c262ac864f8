-- api_outbox_lag.sql — crier.api_outbox_lag: seconds since the oldest due event has been
-- waiting for fan-out (0 when none waits): the outbox lag that GET /healthz compares with
-- its threshold.
CREATE OR REPLACE FUNCTION crier.api_outbox_lag() RETURNS double precision LANGUAGE sql STABLE AS $$
    SELECT coalesce(extract(epoch FROM now() - min(available_at))::double precision, 0)
    FROM crier.events WHERE state = 'pending' AND available_at <= now()
$$;
