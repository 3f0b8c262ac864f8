-- worker_state.sql — crier.worker_state: whether a crier serve worker (a row of
-- crier.rules_status) is 'alive' (its last heartbeat is less than 3 of its
-- intervals old), 'stopped' (it said so when it stopped cleanly) or 'dead' (it
-- missed 3 heartbeats: killed, paused, its host or its connection gone).
CREATE OR REPLACE FUNCTION crier.worker_state(p_heartbeat_at timestamptz, p_interval real,
                                              p_stopped_at timestamptz)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_stopped_at IS NOT NULL THEN 'stopped'
                WHEN p_heartbeat_at > now() - make_interval(secs => 3 * p_interval) THEN 'alive'
                ELSE 'dead' END
$$;
