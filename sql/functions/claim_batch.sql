-- claim_batch.sql — crier.claim_batch: the fan-out's claim as one call (src/engine/fanout.c
-- sends "BEGIN; SELECT * FROM crier.claim_batch(n, lane)"): sets the transaction's planner
-- settings (plan_cache_mode = force_generic_plan, enable_seqscan = off, for the batch's
-- cached statements: see fanout.c), claims up to p_limit due events of the lane
-- (crier.claim_events), and tries each claimed event's advisory lock (crier.event_lock_key),
-- in id order (a function scan returns its rows before the select list runs on them), so
-- that no two workers fan out events of one entity at once; locked says whether it was
-- granted; has_settings whether crier.recipient_settings has rows (the same in every row).
-- A function, so that its statements are planned once per connection: the same SELECT sent
-- as a simple query was parsed, analyzed and planned for every batch, 9-13 % of a fan-out
-- connection's CPU at 300 events/s (batches of one to four; perf of the fan-out backends).
-- set_config(…, true) here lasts until the transaction ends (this function has no SET
-- clause of its own). created_at: the event's, as crier.claim_events gives it. The claim moves
-- its lane's floor first (crier.claim_floor_refresh: at most once a second, and only for a lane
-- that has one).
DROP FUNCTION IF EXISTS crier.claim_batch(integer, smallint);
CREATE OR REPLACE FUNCTION crier.claim_batch(p_limit integer, p_lane smallint)
RETURNS TABLE (id bigint, tenant text, event_type text, entity_id text, payload text, attempts integer,
               "cursor" text, locked boolean, has_settings boolean, created_at text)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true);
    PERFORM crier.claim_floor_refresh(p_lane);
    RETURN QUERY
    SELECT c.id, c.tenant, c.event_type, c.entity_id, c.payload, c.attempts, c.cursor,
           pg_try_advisory_xact_lock(crier.event_lock_key(c.tenant, c.event_type, c.entity_id)),
           EXISTS (SELECT FROM crier.recipient_settings), c.created_at
    FROM crier.claim_events(p_limit, p_lane) AS c;
END
$$;
