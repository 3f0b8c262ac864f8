-- probe_delay.sql — crier.probe_delay: delay before the next probe of an endpoint that
-- has been probed p_probes times: p_base * 2^probes, capped at one hour, with full jitter
-- above half.
CREATE OR REPLACE FUNCTION crier.probe_delay(p_base double precision, p_probes integer) RETURNS double precision
LANGUAGE sql VOLATILE AS $$
    SELECT least(3600.0, p_base * power(2, least(p_probes, 20))) * (0.5 + random() / 2)
$$;
