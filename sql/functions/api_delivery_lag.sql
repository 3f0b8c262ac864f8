-- api_delivery_lag.sql — crier.api_delivery_lag: seconds since the oldest due delivery has
-- been waiting for an attempt (0 when none waits; one being sent under a lease does not
-- wait, sql/023): the delivery lag that GET /healthz compares with its threshold and
-- /metrics reports.
CREATE OR REPLACE FUNCTION crier.api_delivery_lag() RETURNS double precision LANGUAGE sql STABLE AS $$
    SELECT coalesce(extract(epoch FROM now() - min(due_at))::double precision, 0)
    FROM crier.deliveries WHERE state = 'pending' AND due_at <= now()
      AND (lease_until IS NULL OR lease_until <= now())
$$;
