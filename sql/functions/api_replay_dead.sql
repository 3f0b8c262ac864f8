-- api_replay_dead.sql — crier.api_replay_dead: replays a tenant's dead letters for POST
-- /v1/dead/replay: crier.replay_dead (replay_dead.sql) for one tenant, which it insists
-- on (the API never acts on "all tenants").
CREATE OR REPLACE FUNCTION crier.api_replay_dead(p_tenant text, p_type text, p_channel text, p_since timestamptz,
                                                 p_until timestamptz, p_kind text, p_id bigint, p_event bigint,
                                                 p_limit integer,
                                                 OUT deliveries integer, OUT events integer,
                                                 OUT endpoints_enabled integer, OUT remaining bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_tenant IS NULL THEN
        RAISE EXCEPTION 'crier.api_replay_dead: a tenant is required' USING ERRCODE = '22023';
    END IF;
    SELECT r.deliveries, r.events, r.endpoints_enabled, r.remaining
    INTO deliveries, events, endpoints_enabled, remaining
    FROM crier.replay_dead(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event, p_limit) r;
END;
$$;
