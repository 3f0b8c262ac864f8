-- apply_delivery_results.sql — crier.apply_delivery_results: the update of crier.complete_deliveries,
-- one row per attempt result (parallel arrays as there), applied only to a delivery that still
-- carries that attempt number under a lease; returns what it applied.
--
-- A statement of its own so that its plan cannot depend on the statistics. Its plan is generic,
-- made once per session (plan_cache_mode, as in complete_deliveries), and the join of the
-- results to their rows was left to the planner: on an empty or freshly analyzed table (a new
-- database, after a TRUNCATE) it hashed every entry of deliveries_due — the whole due backlog —
-- for each batch of results, or read deliveries_pkey from end to end, and PL/pgSQL kept that
-- plan while the table grew (30-55 ms a batch under crier bench deliver's preload,
-- docs/BENCHMARKS.md, twenty-fifth session; tests/integration/plans_stable.sh). Here the rows are
-- reached by a bitmap of the primary key for id = ANY(the batch's ids), the only way left open:
-- sequential, index and TID scans are off, a bitmap scan has an index condition (or reads a
-- partial index whose predicate the query implies: none here, see the fence), and no other
-- index has a condition here; nested loops are off too (rescanning the batch for every row:
-- n x n), so the batch joins its rows by a hash. Whatever the statistics, a batch reads its own
-- rows and nothing else.
CREATE OR REPLACE FUNCTION crier.apply_delivery_results(
    p_id bigint[], p_attempt integer[], p_outcome text[], p_health text[], p_status integer[],
    p_error text[], p_delay double precision[], p_probe boolean[], p_duration double precision[])
RETURNS TABLE (tenant text, channel text, target text, final text, health text, status integer, error text,
               duration double precision, emitted_at timestamptz)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_indexscan = off
SET enable_indexonlyscan = off
SET enable_tidscan = off
SET enable_nestloop = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH x AS (
        SELECT a.* FROM unnest(p_id, p_attempt, p_outcome, p_health, p_status, p_error, p_delay, p_probe, p_duration)
            AS a(id, attempt, outcome, health, status, error, delay, probe, duration)
    )
    UPDATE crier.deliveries d SET
        state = CASE x.outcome WHEN 'delivered' THEN 'delivered' WHEN 'dead' THEN 'dead' ELSE 'pending' END,
        budget_start = CASE WHEN x.outcome = 'released' OR (x.probe AND x.outcome = 'retry')
                            THEN d.budget_start + 1 ELSE d.budget_start END,
        last_status = CASE WHEN x.outcome = 'released' THEN d.last_status ELSE x.status END,
        last_error = CASE WHEN x.outcome = 'released' THEN d.last_error ELSE x.error END,
        due_at = now() + make_interval(secs => CASE WHEN x.outcome = 'retry' THEN x.delay ELSE 0 END),
        delivered_at = CASE WHEN x.outcome = 'delivered' THEN now() END,
        dead_at = CASE WHEN x.outcome = 'dead' THEN now() END,
        lease_until = NULL
    FROM x
    -- No test of state: it would make deliveries_due, whose predicate it implies, a way to the
    -- rows with no condition at all. A lease is only ever on a pending delivery (sql/030).
    WHERE d.id = ANY(p_id) AND d.id = x.id AND d.attempts = x.attempt AND d.lease_until IS NOT NULL
    RETURNING d.tenant, d.channel, d.target, x.outcome, x.health, x.status, x.error, x.duration, d.emitted_at;
END
$$;
