-- claim_events.sql — crier.claim_events: the fan-out's claim: up to p_limit due events of a
-- lane (0: the fast lane, 1: the slow lane), oldest first, locked for this transaction
-- through their rows in crier.event_queue (FOR UPDATE SKIP LOCKED: concurrent workers take
-- different events; sql/025_event_queue.sql). The queue's rows are read along its primary
-- key (lane, id), whatever the statistics say: an index chosen from the statistics of a
-- table analyzed while a backlog was pending, or never analyzed, made each claim read the
-- whole backlog, and claims slowed down as the backlog grew (from 2 to 26 ms per claim of 500
-- over a backlog of 40,000). The lane is compared as a range (lane >= p_lane AND lane <=
-- p_lane, which PostgreSQL does not turn into an equality), so that the primary key gives
-- the order without a sort. Bitmap and sequential scans are off for this function. PL/pgSQL,
-- not LANGUAGE sql: a SQL function with a SET clause is never inlined, so it was parsed and
-- planned again for every claim; PL/pgSQL keeps the plan for the session
-- (tests/integration/plans_stable.sh).
--
-- crier.events stays the truth: only events whose state is 'pending', in this lane and due
-- are returned. A locked queue row whose event is not (marked done or dead by an UPDATE of
-- someone else, moved to the other lane, deleted) is deleted here; one whose event is
-- pending but not due yet gets the event's available_at. The queue row is the claim (the
-- fan-out's write deletes it with the done mark); the events returned are locked FOR KEY
-- SHARE, which lets the batch mark them done (a HOT update) and keeps a DELETE (or a change
-- of id) waiting until the batch has ended, so that crier.check_event_children then sees
-- the batch's notifications and refuses it (tests/integration/fanout_references.sh); an
-- event that another transaction holds FOR UPDATE is skipped and stays pending, as before.
-- In the psql loop of docs/BENCHMARKS.md (twelfth session) that lock cost 1.4 us per event.
CREATE OR REPLACE FUNCTION crier.claim_events(p_limit integer, p_lane smallint)
RETURNS TABLE (id bigint, tenant text, event_type text, entity_id text, payload text, attempts integer,
               "cursor" text)
LANGUAGE plpgsql
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    v_ids bigint[];
    v_found integer;
BEGIN
    SELECT array_agg(q.id ORDER BY q.id) INTO v_ids
    FROM (SELECT q.id FROM crier.event_queue q
          WHERE q.available_at <= now() AND q.lane >= p_lane AND q.lane <= p_lane
          ORDER BY q.lane, q.id LIMIT p_limit
          FOR UPDATE SKIP LOCKED) q;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT e.id, e.tenant, e.event_type, e.entity_id, e.payload::text, e.attempts, e.cursor
    FROM crier.events e
    WHERE e.id = ANY(v_ids) AND e.state = 'pending' AND e.lane = p_lane AND e.available_at <= now()
    ORDER BY e.id
    FOR KEY SHARE OF e SKIP LOCKED;
    GET DIAGNOSTICS v_found = ROW_COUNT;
    IF v_found < cardinality(v_ids) THEN
        DELETE FROM crier.event_queue q
        WHERE q.lane = p_lane AND q.id = ANY(v_ids)
          AND NOT EXISTS (SELECT FROM crier.events e WHERE e.id = q.id AND e.state = 'pending' AND e.lane = p_lane);
        UPDATE crier.event_queue q SET available_at = e.available_at
        FROM crier.events e
        WHERE q.lane = p_lane AND q.id = ANY(v_ids) AND e.id = q.id AND e.state = 'pending'
          AND e.lane = p_lane AND e.available_at > now();
    END IF;
END
$$;
