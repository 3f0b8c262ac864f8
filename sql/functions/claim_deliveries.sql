-- claim_deliveries.sql — crier.claim_deliveries: the delivery workers' claim: up to
-- p_limit due deliveries for p_lease seconds. Returns the claimed rows; probe is true for
-- a delivery sent to test a paused endpoint. A claim raises attempts and sets lease_until
-- and keeps state 'pending' and due_at (sql/023: no indexed column changes, so the update
-- stays on its page with no new index entry); due rows whose lease has not run out are
-- being sent and are skipped. Deliveries of a paused endpoint met on the
-- way are parked in state 'paused' (not claimed, no attempt spent); those of a disabled
-- endpoint die.
-- The claimed rows are updated where the claim's lock found them (ctid: no second descent of
-- the primary key per row), and endpoints are looked up per row only while some endpoint is
-- paused or disabled (endpoints_not_active, sql/026): 1.9 µs of SQL per delivery less
-- (docs/BENCHMARKS.md, bench deliver, fourteenth session). A due row another transaction
-- changed and committed after this statement began is locked in its new version, which this
-- statement's snapshot cannot update: it is left unclaimed (not leased, no attempt spent),
-- and the next claim takes it.
CREATE OR REPLACE FUNCTION crier.claim_deliveries(p_limit integer, p_lease integer, p_probe_base double precision)
RETURNS TABLE (id bigint, attempts integer, channel text, message_id text, target text, body text,
               secret text, subject text, html text, sender text, retry_schedule integer[],
               budget_start integer, probe boolean)
LANGUAGE plpgsql
-- Due rows in deliveries_due's order, whatever the statistics say: with a table analyzed
-- when few rows were due, or never analyzed (a new database before autovacuum's first
-- round), the planner took a bitmap scan of every due row and a sort (170-200 ms per claim
-- under a 175,000-row backlog, against 0.3 ms for the ordered index scan), and claims
-- slowed down as the backlog they should drain grew.
-- And no sequential scan of deliveries: a plan made while the table was empty or tiny (a
-- new database, after a TRUNCATE) joined the claimed rows to a sequential scan of the
-- whole table, and PL/pgSQL kept that plan for the session while the table grew (10,000
-- rows read per claim, 9,752 times in one 20-second run of crier bench deliver; seen with
-- auto_explain). Every row is reached through an index.
SET enable_bitmapscan = off
SET enable_seqscan = off
-- Generic plans, made once per session, as crier.complete_deliveries (planned again on every
-- claim otherwise).
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    -- Every endpoint active (almost always): only due rows to claim, and nothing to park or
    -- probe. A statement's data-modifying CTEs start up (their tables and indexes opened) and
    -- run whether or not they find rows, so the two statements below cost a claim ~40 us of
    -- server time more than this one even with nothing to do: 525 claims a second of one or
    -- two deliveries at 500 events/s (pgbench of an empty claim: 133-176 us against 177-214 us
    -- per transaction, 111-124 us for BEGIN; SELECT 1; COMMIT; docs/BENCHMARKS.md, bench
    -- deliver, nineteenth session). An endpoint paused after this check and before the claim
    -- gets the deliveries claimed here once, as it would had it been paused just after it.
    IF NOT EXISTS (SELECT FROM crier.endpoints e WHERE e.state <> 'active') THEN
        RETURN QUERY
        WITH due AS MATERIALIZED (
            SELECT d.ctid FROM crier.deliveries d
            WHERE d.state = 'pending' AND d.due_at <= now() AND (d.lease_until IS NULL OR d.lease_until <= now())
            ORDER BY d.due_at LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE crier.deliveries d SET attempts = d.attempts + 1, lease_until = now() + make_interval(secs => p_lease)
            FROM due WHERE d.ctid = due.ctid
            RETURNING d.id, d.attempts, d.channel, d.message_id, d.target, d.body, d.secret, d.subject,
                      d.html, d.sender, d.retry_schedule, d.budget_start
        )
        SELECT c.*, false FROM claimed c;
        RETURN;
    END IF;

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
        UPDATE crier.deliveries d SET state = 'pending', attempts = d.attempts + 1, due_at = now(),
            lease_until = now() + make_interval(secs => p_lease)
        FROM pick WHERE d.id = pick.id
        RETURNING d.id, d.attempts, d.channel, d.message_id, d.target, d.body, d.secret, d.subject,
                  d.html, d.sender, d.retry_schedule, d.budget_start
    )
    SELECT c.*, true FROM claimed c;

    RETURN QUERY
    -- The due rows are taken from deliveries alone, in deliveries_due's order, before their
    -- endpoints are looked up: joined first, the planner could hash-join every due row with
    -- the endpoints and sort them (205 ms per claim under a 200,000-row backlog).
    WITH due AS MATERIALIZED (
        SELECT d.id, d.ctid, d.tenant, d.channel, d.target FROM crier.deliveries d
        WHERE d.state = 'pending' AND d.due_at <= now() AND (d.lease_until IS NULL OR d.lease_until <= now())
        ORDER BY d.due_at LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), cand AS (
        SELECT due.id, due.ctid,
               CASE WHEN (SELECT EXISTS (SELECT FROM crier.endpoints e WHERE e.state <> 'active'))
                    THEN (SELECT e.state FROM crier.endpoints e
                          WHERE e.tenant = due.tenant AND e.channel = due.channel AND e.target = due.target
                            AND e.state <> 'active') END AS ep_state
        FROM due
    ), parked AS (
        UPDATE crier.deliveries d
        SET state = CASE WHEN c.ep_state = 'disabled' THEN 'dead' ELSE 'paused' END,
            dead_at = CASE WHEN c.ep_state = 'disabled' THEN now() END, lease_until = NULL,
            last_error = CASE WHEN c.ep_state = 'disabled'
                              THEN 'endpoint disabled after failing too long; replay with crier dead replay '
                                   'once it works again'
                              ELSE d.last_error END
        FROM cand c WHERE d.id = c.id AND c.ep_state IS NOT NULL
        RETURNING d.id
    ), claimed AS (
        UPDATE crier.deliveries d SET attempts = d.attempts + 1, lease_until = now() + make_interval(secs => p_lease)
        FROM cand c WHERE d.ctid = c.ctid AND c.ep_state IS NULL
        RETURNING d.id, d.attempts, d.channel, d.message_id, d.target, d.body, d.secret, d.subject,
                  d.html, d.sender, d.retry_schedule, d.budget_start
    )
    SELECT c.*, false FROM claimed c;
END;
$$;
