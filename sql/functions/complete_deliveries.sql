-- complete_deliveries.sql — crier.complete_deliveries: the delivery workers' write of one
-- batch of attempt results. Arrays are parallel, one element per attempt:
--   p_outcome: 'delivered'; 'retry' (due again after p_delay seconds); 'dead'
--     (permanent failure, or the retry schedule is spent: the worker decides);
--     'released' (not sent, e.g. at shutdown: due again now, no attempt spent);
--   p_health: how the attempt bears on its endpoint: 'ok', 'fail', 'gone'
--     (HTTP 410: pause at once) or 'none';
--   p_probe: the attempt was a probe of a paused endpoint (a failed probe does
--     not spend the delivery's schedule).
-- A result is applied only if the delivery still carries that attempt number
-- under a lease (the fence against a worker whose lease was taken over); it
-- clears the lease;
-- the attempt is recorded either way (after the update, see below).
-- Endpoint policy: p_pause_after consecutive failures pause an endpoint;
-- one failing for longer than p_disable_after seconds while paused is
-- disabled, its waiting deliveries die, and a crier.endpoint.disabled event is
-- emitted. Returns counts, and the endpoints paused, resumed and disabled.
-- Every row it touches is found by a key, so no sequential scan: a plan made while
-- deliveries was empty or tiny (a new database, after a TRUNCATE) read the whole table for
-- each batch of results, and PL/pgSQL kept that plan for the session while the table grew
-- (5,166 times in one 20-second run of crier bench deliver; seen with auto_explain). The
-- results' update itself is crier.apply_delivery_results, whose plan is pinned down further.
CREATE OR REPLACE FUNCTION crier.complete_deliveries(
    p_id bigint[], p_attempt integer[], p_outcome text[], p_health text[], p_status integer[],
    p_error text[], p_excerpt text[], p_delay double precision[], p_started double precision[],
    p_duration double precision[], p_probe boolean[],
    p_pause_after integer, p_disable_after double precision, p_probe_base double precision,
    OUT applied integer, OUT delivered integer, OUT retried integer, OUT dead integer,
    OUT paused text[], OUT resumed text[], OUT disabled text[])
LANGUAGE plpgsql
SET enable_seqscan = off
-- Generic plans, made once per session: with the default (auto), the statements here were
-- planned again on every call, their arrays making a custom plan look cheaper; at 500
-- deliveries/s (batches of one or two) planning was 25 % of a delivery backend's CPU, and
-- 5 % with this (perf; docs/BENCHMARKS.md, eighteenth session). Every row is reached by a
-- key, so the generic plan is the custom one.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_ok_t text[]; v_ok_c text[]; v_ok_g text[];
    v_f_t text[]; v_f_c text[]; v_f_g text[]; v_f_n integer[]; v_f_gone boolean[];
    v_f_status integer[]; v_f_error text[];
    v_s_channel text[]; v_s_outcome text[]; v_s_ms double precision[]; v_s_emitted timestamptz[];
    r record;
BEGIN
    WITH upd AS (
        -- (a function of its own: its plan reads the batch's rows and nothing else, whatever
        -- the statistics; see there)
        SELECT * FROM crier.apply_delivery_results(p_id, p_attempt, p_outcome, p_health, p_status, p_error,
                                                   p_delay, p_probe, p_duration)
    ), sent AS (
        SELECT array_agg(channel) AS c, array_agg(final) AS o, array_agg(duration) AS ms,
               array_agg(emitted_at) AS emitted
        FROM upd
    ), counted AS (
        SELECT count(*)::int AS n,
               count(*) FILTER (WHERE final = 'delivered')::int AS n_ok,
               count(*) FILTER (WHERE final = 'retry')::int AS n_retry,
               count(*) FILTER (WHERE final = 'dead')::int AS n_dead
        FROM upd
    ), ok AS (
        SELECT array_agg(tenant) AS t, array_agg(channel) AS c, array_agg(target) AS g
        FROM (SELECT DISTINCT tenant, channel, target FROM upd WHERE health = 'ok') s
    ), failing AS (
        SELECT array_agg(tenant ORDER BY tenant, channel, target) AS t,
               array_agg(channel ORDER BY tenant, channel, target) AS c,
               array_agg(target ORDER BY tenant, channel, target) AS g,
               array_agg(n ORDER BY tenant, channel, target) AS n,
               array_agg(gone ORDER BY tenant, channel, target) AS gone,
               array_agg(status ORDER BY tenant, channel, target) AS status,
               array_agg(error ORDER BY tenant, channel, target) AS error
        FROM (SELECT tenant, channel, target, count(*)::int AS n, bool_or(health = 'gone') AS gone,
                     max(status) AS status, max(error) AS error
              FROM upd u
              WHERE health IN ('fail', 'gone')
                AND NOT EXISTS (SELECT 1 FROM upd o WHERE o.health = 'ok' AND o.tenant = u.tenant
                                AND o.channel = u.channel AND o.target = u.target)
              GROUP BY tenant, channel, target) s
    )
    SELECT counted.n, counted.n_ok, counted.n_retry, counted.n_dead,
           ok.t, ok.c, ok.g, failing.t, failing.c, failing.g, failing.n, failing.gone,
           failing.status, failing.error, sent.c, sent.o, sent.ms, sent.emitted
    INTO applied, delivered, retried, dead, v_ok_t, v_ok_c, v_ok_g,
         v_f_t, v_f_c, v_f_g, v_f_n, v_f_gone, v_f_status, v_f_error,
         v_s_channel, v_s_outcome, v_s_ms, v_s_emitted
    FROM counted, ok, failing, sent;
    -- /metrics: what was applied (dead ones: crier.metrics_delivery_state)
    IF v_s_channel IS NOT NULL THEN
        PERFORM crier.metrics_sent(v_s_channel, v_s_outcome, v_s_ms, v_s_emitted);
    END IF;

    -- The attempts, after the update: the deliveries it changed are locked until commit, so
    -- a concurrent DELETE of one waits and then meets them (sql/021, check_delivery_children).
    -- An attempt already recorded (results written again after a commit whose outcome was
    -- lost with the connection) is skipped. A plain insert goes first: ON CONFLICT DO NOTHING
    -- probes the key before each row and confirms it with a second WAL record, 1.1–1.8 µs a
    -- row more (docs/BENCHMARKS.md, bench deliver); only when the key refuses one does the
    -- batch go in again, skipping the existing ones.
    BEGIN
        INSERT INTO crier.delivery_attempts (delivery_id, attempt, started_at, duration_ms, outcome, status,
                                             error, response_excerpt)
        SELECT a.id, a.attempt, to_timestamp(a.started), a.duration, a.outcome, a.status, a.error, a.excerpt
        FROM unnest(p_id, p_attempt, p_started, p_duration, p_outcome, p_status, p_error, p_excerpt)
            AS a(id, attempt, started, duration, outcome, status, error, excerpt);
    EXCEPTION WHEN unique_violation THEN
        INSERT INTO crier.delivery_attempts (delivery_id, attempt, started_at, duration_ms, outcome, status,
                                             error, response_excerpt)
        SELECT a.id, a.attempt, to_timestamp(a.started), a.duration, a.outcome, a.status, a.error, a.excerpt
        FROM unnest(p_id, p_attempt, p_started, p_duration, p_outcome, p_status, p_error, p_excerpt)
            AS a(id, attempt, started, duration, outcome, status, error, excerpt)
        ON CONFLICT DO NOTHING;
    END;

    -- Endpoints that answered: healthy again; a paused one resumes and its
    -- parked deliveries are due now.
    IF v_ok_t IS NOT NULL THEN
        FOR r IN
            UPDATE crier.endpoints e SET state = 'active', consecutive_failures = 0, failing_since = NULL,
                paused_at = NULL, next_probe_at = NULL, probes = 0, updated_at = now()
            FROM unnest(v_ok_t, v_ok_c, v_ok_g) AS o(tenant, channel, target)
            WHERE e.tenant = o.tenant AND e.channel = o.channel AND e.target = o.target
              AND e.state = 'paused'
            RETURNING e.id, e.tenant, e.channel, e.target
        LOOP
            UPDATE crier.deliveries d SET state = 'pending', due_at = now()
            WHERE d.state = 'paused' AND d.tenant = r.tenant AND d.channel = r.channel AND d.target = r.target;
            resumed := array_append(resumed, r.tenant || ' ' || r.target);
        END LOOP;
        UPDATE crier.endpoints e SET consecutive_failures = 0, failing_since = NULL, updated_at = now()
        FROM unnest(v_ok_t, v_ok_c, v_ok_g) AS o(tenant, channel, target)
        WHERE e.tenant = o.tenant AND e.channel = o.channel AND e.target = o.target
          AND e.state = 'active' AND e.consecutive_failures > 0;
    END IF;

    IF v_f_t IS NOT NULL THEN
        FOR r IN
            INSERT INTO crier.endpoints AS e (tenant, channel, target, consecutive_failures, failing_since,
                                              state, paused_at, next_probe_at, last_status, last_error)
            SELECT f.tenant, f.channel, f.target, f.n, now(),
                   CASE WHEN f.gone OR f.n >= p_pause_after THEN 'paused' ELSE 'active' END,
                   CASE WHEN f.gone OR f.n >= p_pause_after THEN now() END,
                   CASE WHEN f.gone OR f.n >= p_pause_after
                        THEN now() + make_interval(secs => crier.probe_delay(p_probe_base, 0)) END,
                   f.status, f.error
            FROM unnest(v_f_t, v_f_c, v_f_g, v_f_n, v_f_gone, v_f_status, v_f_error)
                AS f(tenant, channel, target, n, gone, status, error)
            ON CONFLICT (tenant, channel, target) DO UPDATE SET
                consecutive_failures = e.consecutive_failures + EXCLUDED.consecutive_failures,
                failing_since = coalesce(e.failing_since, now()),
                last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error, updated_at = now(),
                state = CASE WHEN e.state <> 'active' THEN e.state
                             WHEN EXCLUDED.paused_at IS NOT NULL
                               OR e.consecutive_failures + EXCLUDED.consecutive_failures >= p_pause_after
                             THEN 'paused' ELSE 'active' END,
                paused_at = CASE WHEN e.state <> 'active' THEN e.paused_at
                                 WHEN EXCLUDED.paused_at IS NOT NULL
                                   OR e.consecutive_failures + EXCLUDED.consecutive_failures >= p_pause_after
                                 THEN now() END,
                next_probe_at = CASE WHEN e.state <> 'active' THEN e.next_probe_at
                                     WHEN EXCLUDED.paused_at IS NOT NULL
                                       OR e.consecutive_failures + EXCLUDED.consecutive_failures >= p_pause_after
                                     THEN now() + make_interval(secs => crier.probe_delay(p_probe_base, 0)) END
            RETURNING e.id, e.tenant, e.channel, e.target, e.state, e.paused_at, e.failing_since,
                      e.last_status, e.last_error, e.consecutive_failures
        LOOP
            IF r.state = 'paused' AND r.paused_at = now() THEN
                paused := array_append(paused, r.tenant || ' ' || r.target);
            END IF;
            IF r.state = 'paused' AND r.failing_since <= now() - make_interval(secs => p_disable_after) THEN
                UPDATE crier.endpoints SET state = 'disabled', disabled_at = now(), next_probe_at = NULL
                WHERE id = r.id;
                UPDATE crier.deliveries d SET state = 'dead', dead_at = now(),
                    last_error = 'endpoint disabled after failing since ' || r.failing_since
                                 || '; replay with crier dead replay once it works again'
                WHERE (d.state = 'paused' OR (d.state = 'pending' AND d.lease_until IS NULL))
                  AND d.tenant = r.tenant AND d.channel = r.channel AND d.target = r.target;
                PERFORM crier.emit(r.tenant, 'crier.endpoint.disabled', r.id::text,
                    jsonb_build_object('endpoint_id', r.id, 'channel', r.channel, 'target', r.target,
                                       'failing_since', r.failing_since,
                                       'consecutive_failures', r.consecutive_failures,
                                       'last_status', r.last_status, 'last_error', r.last_error),
                    'crier.endpoint.disabled:' || r.id || ':' || extract(epoch FROM now())::bigint);
                disabled := array_append(disabled, r.tenant || ' ' || r.target);
            END IF;
        END LOOP;
    END IF;
END;
$$;
