-- 002_delivery.sql — the delivery engine: channel content columns, per-delivery
-- retry schedules, a record of every attempt, endpoint health (pause, probe,
-- resume, disable), and the two statements the workers run per batch:
-- crier.claim_deliveries() and crier.complete_deliveries().

-- Content for channels other than webhook, and the retry policy.
--   webhook: target = URL, body = JSON, secret = whsec_… (several, space-separated, while rotating)
--   email:   target = recipient address, subject, body = text part, html = HTML part, sender = From
--   kafka:   target = topic, body = message value
ALTER TABLE crier.deliveries
    ADD COLUMN subject        text,
    ADD COLUMN html           text,
    ADD COLUMN sender         text,
    -- retry_schedule[n] is the delay in seconds before attempt n (attempt 1 is
    -- normally 0); its length is the number of attempts. NULL: the channel's default.
    ADD COLUMN retry_schedule integer[],
    -- attempts made before the last replay: the schedule restarts from here.
    ADD COLUMN budget_start   integer NOT NULL DEFAULT 0,
    ADD COLUMN dead_at        timestamptz;

ALTER TABLE crier.deliveries DROP CONSTRAINT deliveries_state_check;
-- paused: waits for its endpoint to recover (attempts are not spent meanwhile).
ALTER TABLE crier.deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'sending', 'paused', 'delivered', 'dead'));
CREATE INDEX deliveries_dead ON crier.deliveries (dead_at) WHERE state = 'dead';
CREATE INDEX deliveries_paused ON crier.deliveries (tenant, channel, target) WHERE state = 'paused';

-- One row per attempt, whatever its outcome.
CREATE TABLE crier.delivery_attempts (
    delivery_id      bigint           NOT NULL REFERENCES crier.deliveries (id),
    attempt          integer          NOT NULL,
    started_at       timestamptz      NOT NULL,
    duration_ms      double precision NOT NULL,
    -- delivered, retry (another attempt is scheduled), dead, released (shutdown)
    outcome          text             NOT NULL,
    status           integer,          -- HTTP status or SMTP reply code
    error            text,
    response_excerpt text,             -- bounded
    PRIMARY KEY (delivery_id, attempt)
);

-- Endpoints that have failed at least once (rows appear on the first failure).
-- A run of consecutive failures pauses the endpoint: its deliveries wait in
-- state 'paused', one is sent as a probe at next_probe_at, a success resumes
-- the endpoint; failing for longer than the disable horizon disables it.
CREATE TABLE crier.endpoints (
    id                   bigserial   PRIMARY KEY,
    tenant               text        NOT NULL,
    channel              text        NOT NULL,
    target               text        NOT NULL,
    state                text        NOT NULL DEFAULT 'active'
                                     CHECK (state IN ('active', 'paused', 'disabled')),
    consecutive_failures integer     NOT NULL DEFAULT 0,
    failing_since        timestamptz,
    paused_at            timestamptz,
    next_probe_at        timestamptz,
    probes               integer     NOT NULL DEFAULT 0,
    disabled_at          timestamptz,
    last_status          integer,
    last_error           text,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, channel, target)
);
CREATE INDEX endpoints_probe ON crier.endpoints (next_probe_at) WHERE state = 'paused';

-- Delay before the next probe of an endpoint that has been probed p_probes
-- times: p_base * 2^probes, capped at one hour, with full jitter above half.
CREATE FUNCTION crier.probe_delay(p_base double precision, p_probes integer) RETURNS double precision
LANGUAGE sql VOLATILE AS $$
    SELECT least(3600.0, p_base * power(2, least(p_probes, 20))) * (0.5 + random() / 2)
$$;

-- Claims up to p_limit due deliveries for p_lease seconds. Returns the claimed
-- rows; probe is true for a delivery sent to test a paused endpoint.
-- Deliveries of a paused endpoint met on the way are parked in state 'paused'
-- (not claimed, no attempt spent); those of a disabled endpoint die.
CREATE FUNCTION crier.claim_deliveries(p_limit integer, p_lease integer, p_probe_base double precision)
RETURNS TABLE (id bigint, attempts integer, channel text, message_id text, target text, body text,
               secret text, subject text, html text, sender text, retry_schedule integer[],
               budget_start integer, probe boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- Data-modifying CTEs run whether or not the final SELECT reads them.
    -- Probes first: one parked delivery per paused endpoint whose probe is due.
    RETURN QUERY
    WITH ep AS (
        SELECT e.id, e.tenant, e.channel, e.target FROM crier.endpoints e
        WHERE e.state = 'paused' AND e.next_probe_at <= now()
        ORDER BY e.next_probe_at LIMIT greatest(1, p_limit / 4)
        FOR UPDATE SKIP LOCKED
    ), pick AS (
        SELECT ep.id AS endpoint_id, p.id
        FROM ep CROSS JOIN LATERAL (
            SELECT d.id FROM crier.deliveries d
            WHERE d.state = 'paused' AND d.tenant = ep.tenant AND d.channel = ep.channel AND d.target = ep.target
            ORDER BY d.id LIMIT 1 FOR UPDATE SKIP LOCKED) p
    ), bump AS (
        UPDATE crier.endpoints e
        SET next_probe_at = now() + make_interval(secs => crier.probe_delay(p_probe_base, e.probes + 1)),
            probes = e.probes + 1, updated_at = now()
        FROM ep WHERE e.id = ep.id
        RETURNING e.id
    ), claimed AS (
        UPDATE crier.deliveries d SET state = 'sending', attempts = d.attempts + 1,
            due_at = now() + make_interval(secs => p_lease)
        FROM pick WHERE d.id = pick.id
        RETURNING d.id, d.attempts, d.channel, d.message_id, d.target, d.body, d.secret, d.subject,
                  d.html, d.sender, d.retry_schedule, d.budget_start
    )
    SELECT c.*, true FROM claimed c;

    RETURN QUERY
    WITH cand AS (
        SELECT d.id, e.state AS ep_state, e.next_probe_at
        FROM crier.deliveries d
        LEFT JOIN crier.endpoints e
            ON e.tenant = d.tenant AND e.channel = d.channel AND e.target = d.target AND e.state <> 'active'
        WHERE d.state IN ('pending', 'sending') AND d.due_at <= now()
        ORDER BY d.due_at LIMIT p_limit
        FOR UPDATE OF d SKIP LOCKED
    ), parked AS (
        UPDATE crier.deliveries d
        SET state = CASE WHEN c.ep_state = 'disabled' THEN 'dead' ELSE 'paused' END,
            dead_at = CASE WHEN c.ep_state = 'disabled' THEN now() END,
            last_error = CASE WHEN c.ep_state = 'disabled'
                              THEN 'endpoint disabled after failing too long; replay with crier dead replay '
                                   'once it works again'
                              ELSE d.last_error END
        FROM cand c WHERE d.id = c.id AND c.ep_state IS NOT NULL
        RETURNING d.id
    ), claimed AS (
        UPDATE crier.deliveries d SET state = 'sending', attempts = d.attempts + 1,
            due_at = now() + make_interval(secs => p_lease)
        FROM cand c WHERE d.id = c.id AND c.ep_state IS NULL
        RETURNING d.id, d.attempts, d.channel, d.message_id, d.target, d.body, d.secret, d.subject,
                  d.html, d.sender, d.retry_schedule, d.budget_start
    )
    SELECT c.*, false FROM claimed c;
END;
$$;

-- Writes one batch of attempt results. Arrays are parallel, one element per attempt:
--   p_outcome: 'delivered'; 'retry' (due again after p_delay seconds); 'dead'
--     (permanent failure, or the retry schedule is spent: the worker decides);
--     'released' (not sent, e.g. at shutdown: due again now, no attempt spent);
--   p_health: how the attempt bears on its endpoint: 'ok', 'fail', 'gone'
--     (HTTP 410: pause at once) or 'none';
--   p_probe: the attempt was a probe of a paused endpoint (a failed probe does
--     not spend the delivery's schedule).
-- A result is applied only if the delivery still carries that attempt number
-- in state 'sending' (the fence against a worker whose lease was taken over);
-- the attempt is recorded either way.
-- Endpoint policy: p_pause_after consecutive failures pause an endpoint;
-- one failing for longer than p_disable_after seconds while paused is
-- disabled, its waiting deliveries die, and a crier.endpoint.disabled event is
-- emitted. Returns counts, and the endpoints paused, resumed and disabled.
CREATE FUNCTION crier.complete_deliveries(
    p_id bigint[], p_attempt integer[], p_outcome text[], p_health text[], p_status integer[],
    p_error text[], p_excerpt text[], p_delay double precision[], p_started double precision[],
    p_duration double precision[], p_probe boolean[],
    p_pause_after integer, p_disable_after double precision, p_probe_base double precision,
    OUT applied integer, OUT delivered integer, OUT retried integer, OUT dead integer,
    OUT paused text[], OUT resumed text[], OUT disabled text[])
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ok_t text[]; v_ok_c text[]; v_ok_g text[];
    v_f_t text[]; v_f_c text[]; v_f_g text[]; v_f_n integer[]; v_f_gone boolean[];
    v_f_status integer[]; v_f_error text[];
    r record;
BEGIN
    INSERT INTO crier.delivery_attempts (delivery_id, attempt, started_at, duration_ms, outcome, status,
                                         error, response_excerpt)
    SELECT a.id, a.attempt, to_timestamp(a.started), a.duration, a.outcome, a.status, a.error, a.excerpt
    FROM unnest(p_id, p_attempt, p_started, p_duration, p_outcome, p_status, p_error, p_excerpt)
        AS a(id, attempt, started, duration, outcome, status, error, excerpt)
    ON CONFLICT DO NOTHING;

    WITH x AS (
        SELECT a.* FROM unnest(p_id, p_attempt, p_outcome, p_health, p_status, p_error, p_delay, p_probe)
            AS a(id, attempt, outcome, health, status, error, delay, probe)
    ), upd AS (
        UPDATE crier.deliveries d SET
            state = CASE x.outcome WHEN 'delivered' THEN 'delivered' WHEN 'dead' THEN 'dead' ELSE 'pending' END,
            budget_start = CASE WHEN x.outcome = 'released' OR (x.probe AND x.outcome = 'retry')
                                THEN d.budget_start + 1 ELSE d.budget_start END,
            last_status = CASE WHEN x.outcome = 'released' THEN d.last_status ELSE x.status END,
            last_error = CASE WHEN x.outcome = 'released' THEN d.last_error ELSE x.error END,
            due_at = now() + make_interval(secs => CASE WHEN x.outcome = 'retry' THEN x.delay ELSE 0 END),
            delivered_at = CASE WHEN x.outcome = 'delivered' THEN now() END,
            dead_at = CASE WHEN x.outcome = 'dead' THEN now() END
        FROM x WHERE d.id = x.id AND d.attempts = x.attempt AND d.state = 'sending'
        RETURNING d.tenant, d.channel, d.target, x.outcome AS final, x.health, x.status, x.error
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
           failing.status, failing.error
    INTO applied, delivered, retried, dead, v_ok_t, v_ok_c, v_ok_g,
         v_f_t, v_f_c, v_f_g, v_f_n, v_f_gone, v_f_status, v_f_error
    FROM counted, ok, failing;

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
                WHERE d.state IN ('paused', 'pending') AND d.tenant = r.tenant AND d.channel = r.channel
                  AND d.target = r.target;
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
