-- replay_dead.sql — crier.replay_dead: replays up to p_limit dead letters matching the
-- filters (p_tenant NULL: every tenant's), for `crier dead replay` and
-- crier.api_replay_dead: a delivery is due now with a fresh retry schedule under the same
-- key (its disabled endpoint is enabled), an event is fanned out again. Only dead rows
-- are touched, so replaying twice sends nothing twice. remaining: dead letters still
-- matching afterwards (call again while above 0).
CREATE OR REPLACE FUNCTION crier.replay_dead(p_tenant text, p_type text, p_channel text, p_since timestamptz,
                                  p_until timestamptz, p_kind text, p_id bigint, p_event bigint,
                                  p_limit integer,
                                  OUT deliveries integer, OUT events integer, OUT endpoints_enabled integer,
                                  OUT remaining bigint)
LANGUAGE plpgsql AS $$
BEGIN
    WITH picked AS (
        SELECT x.id FROM crier.dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event) x
        WHERE x.kind = 'delivery' ORDER BY x.id LIMIT p_limit
    ), upd AS (
        UPDATE crier.deliveries d SET state = 'pending', due_at = now(), budget_start = d.attempts, dead_at = NULL
        FROM picked WHERE d.id = picked.id AND d.state = 'dead'
        RETURNING d.tenant, d.channel, d.target
    ), ep AS (
        UPDATE crier.endpoints e SET state = 'active', consecutive_failures = 0, failing_since = NULL,
            paused_at = NULL, next_probe_at = NULL, probes = 0, disabled_at = NULL, updated_at = now()
        FROM (SELECT DISTINCT u.tenant, u.channel, u.target FROM upd u) u
        WHERE e.tenant = u.tenant AND e.channel = u.channel AND e.target = u.target AND e.state = 'disabled'
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM ep) INTO deliveries, endpoints_enabled;

    WITH picked AS (
        SELECT x.id FROM crier.dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event) x
        WHERE x.kind = 'event' ORDER BY x.id LIMIT greatest(p_limit - deliveries, 0)
    ), upd AS (
        UPDATE crier.events e SET state = 'pending', attempts = 0, available_at = now(), last_error = NULL,
            processed_at = NULL
        FROM picked WHERE e.id = picked.id AND e.state = 'dead'
        RETURNING e.id, e.lane
    ), low AS (
        -- below the claim's floor, perhaps: the claim starts there too (claim_floor.sql)
        INSERT INTO crier.claim_floor_lowered (lane, id)
        SELECT f.lane, min(u.id) FROM upd u JOIN crier.claim_floor f ON f.lane = u.lane GROUP BY f.lane
    )
    SELECT count(*) INTO events FROM upd;
    -- /metrics: a replayed event is waiting again (crier_events_accepted_total
    -- = fanned out + quarantined - replayed + waiting)
    PERFORM crier.metric_add(ARRAY['crier_events_replayed_total', 'crier_deliveries_replayed_total'],
                             ARRAY['', ''], ARRAY['', ''], ARRAY['', ''], ARRAY['', ''],
                             ARRAY[events, deliveries]::double precision[]);

    SELECT count(*) INTO remaining
    FROM crier.dead_letters(p_tenant, p_type, p_channel, p_since, p_until, p_kind, p_id, p_event);
    IF deliveries > 0 THEN
        PERFORM pg_notify('crier_deliveries', '');
    END IF;
    IF events > 0 THEN
        PERFORM pg_notify('crier_events', '');
    END IF;
END;
$$;
