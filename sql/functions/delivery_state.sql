-- delivery_state.sql — crier.delivery_state: a delivery's state as the API, the metrics and
-- crier status show it: 'sending' for a pending delivery under a lease (a worker claimed it
-- and has not written its result; sql/023 keeps such a row 'pending' so that its claim changes
-- no indexed column), the stored state otherwise.
CREATE OR REPLACE FUNCTION crier.delivery_state(p_state text, p_lease_until timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_state = 'pending' AND p_lease_until IS NOT NULL THEN 'sending' ELSE p_state END
$$;
