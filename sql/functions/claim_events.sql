-- claim_events.sql — crier.claim_events: the fan-out's claim: up to p_limit due events of a
-- lane (0: the fast lane, 1: the slow lane), oldest first, locked for this transaction
-- (FOR UPDATE SKIP LOCKED: concurrent workers take different events). Read through
-- events_pending_lane (lane, id) WHERE state = 'pending', whatever the statistics say: a
-- table analyzed while a backlog was pending made the planner walk the primary key past every
-- done event, and one never analyzed (a new database) or analyzed when few events waited made
-- it take a bitmap scan of every pending event and a sort; either way each claim read the
-- whole backlog, and claims slowed down as the backlog grew (from 2 to 26 ms per claim of 500
-- over a backlog of 40,000, the primary-key walk stepping over 29,500 done events at the end).
-- Only that index gives the order (lane, id) without a sort because the lane is compared as a
-- range (lane >= p_lane AND lane <= p_lane, which PostgreSQL does not turn into an equality):
-- with "lane = p_lane" the lane is a constant to the planner and the primary key gives the
-- same order by id, which it chose after such an analyze. Bitmap scans are off for this
-- function. PL/pgSQL, not LANGUAGE sql: a SQL function with a SET clause is never inlined, so
-- it was parsed and planned again for every claim; PL/pgSQL keeps the plan for the session, so
-- sequential scans are off as well: a plan made from the statistics of a tiny table (a new
-- database) was a sequential scan and a sort, kept while the table grew
-- (tests/integration/plans_stable.sh).
-- The scan starts at the lane's floor (crier.claim_floor, sql/functions/claim_floor.sql): a row
-- comparison (lane, id) >= (lane, floor), which positions the index scan there, where
-- "id >= floor" beside a range on the lane would not (the scan would start at the lane's
-- first entry and filter).
-- created_at is the event's commit time as ISO 8601 UTC text: the fan-out copies it into the
-- deliveries it makes (deliveries.emitted_at, sql/025), whatever the session's DateStyle.
DROP FUNCTION IF EXISTS crier.claim_events(integer, smallint);
CREATE OR REPLACE FUNCTION crier.claim_events(p_limit integer, p_lane smallint)
RETURNS TABLE (id bigint, tenant text, event_type text, entity_id text, payload text, attempts integer,
               "cursor" text, created_at text)
LANGUAGE plpgsql
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    v_floor bigint := crier.claim_floor(p_lane);
BEGIN
    RETURN QUERY
    SELECT e.id, e.tenant, e.event_type, e.entity_id, e.payload::text, e.attempts, e.cursor,
           to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    FROM crier.events e
    WHERE e.state = 'pending' AND e.available_at <= now() AND (e.lane, e.id) >= (p_lane, v_floor) AND e.lane <= p_lane
    ORDER BY e.lane, e.id LIMIT p_limit
    FOR UPDATE OF e SKIP LOCKED;
END
$$;
