-- claim_floor.sql — crier.claim_floor, crier.claim_floor_reset and crier.claim_floor_refresh:
-- the id at which the fast lane's claim (crier.claim_events) and the awake daemon's probe
-- (crier.events_waiting) start in events_pending_lane, so that they do not step over the killed entries that a backlog or
-- a burst leaves on the index's left-hand pages until VACUUM (sql/028_claim_floor.sql).
--
-- Why the floor is safe. Ids are drawn before commit, so under concurrency a lower id often
-- commits after a higher one: the floor cannot simply follow the ids claimed. A refresh
-- records a candidate: v, the sequence's position, read first, then the xmax of a snapshot
-- taken after that. crier.emit makes its transaction's xid before it draws an id, so every
-- transaction that drew an id up to v had an xid below that xmax. Once the oldest running
-- transaction is past that xmax, every id up to v is final (committed or rolled back), and a
-- later refresh raises the floor to v + 1 or to the lowest pending id of the lane, whichever
-- is lower. Events that become pending again (a scheduled send fires, a dead event is
-- replayed) leave their id in crier.claim_floor_lowered (for a lane with a floor: a refresh
-- consumes the marks of its own lane only), which lowers the floor at once. And
-- every refresh (once a second while the daemon claims) walks the lane from its first id
-- again, so an event that a path not named here made pending below the floor waits at most
-- that long. With a sequence cache above 1 (ids no longer drawn in order) the floor stays 0.
-- Ids that start again lower start the floor over: a TRUNCATE of crier.events at once
-- (crier.claim_floor_truncated), a sequence set back by hand at the next refresh.
-- Only the fast lane has a floor; the slow lane's claim starts at its first id.

-- The lane's current floor: 0 without one.
-- PL/pgSQL, not LANGUAGE sql: a SQL function whose body has sub-selects is never inlined,
-- so every claim and every probe parsed, analyzed and planned this one again (12.5 % of a
-- fan-out backend's CPU at 500 events/s; crier.events_waiting ran at 8,750-10,000 calls/s
-- with it, 23,000 without: pgbench, one client; docs/BENCHMARKS.md, eighteenth session).
-- PL/pgSQL keeps the plan for the session.
CREATE OR REPLACE FUNCTION crier.claim_floor(p_lane smallint) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT least(f.floor, (SELECT min(l.id) FROM crier.claim_floor_lowered l WHERE l.lane = p_lane))
                     FROM crier.claim_floor f WHERE f.lane = p_lane), 0);
END
$$;

-- No floor for the lane p_lane (every lane when NULL): 0, no candidate, no lowered marks;
-- refreshed_at says when the next refresh may come (crier.claim_floor_refresh: a second after
-- it). One reset for the refresh that finds no floor possible and for a TRUNCATE
-- (crier.claim_floor_truncated).
CREATE OR REPLACE FUNCTION crier.claim_floor_reset(p_lane smallint, p_refreshed_at timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE crier.claim_floor f SET floor = 0, next_floor = NULL, next_xmax = NULL, refreshed_at = p_refreshed_at
    WHERE p_lane IS NULL OR f.lane = p_lane;
    DELETE FROM crier.claim_floor_lowered l WHERE p_lane IS NULL OR l.lane = p_lane;
END
$$;

-- Moves the lane's floor (at most once a second, by one worker at a time: the others skip
-- it). Called by crier.claim_batch inside the batch's transaction.
CREATE OR REPLACE FUNCTION crier.claim_floor_refresh(p_lane smallint) RETURNS void
LANGUAGE plpgsql
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    r crier.claim_floor%ROWTYPE;
    v_ready boolean;
    v_floor bigint;
    v_last bigint;
    v_called boolean;
    v_next bigint;
BEGIN
    SELECT f.* INTO r FROM crier.claim_floor f
    WHERE f.lane = p_lane AND f.refreshed_at <= now() - interval '1 second'
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- The sequence first (a candidate below is this position). No floor while ids are not
    -- drawn in order (a sequence cache above 1), or once the sequence is behind the floor or
    -- the candidate: it was set back (ALTER SEQUENCE ... RESTART, setval; a TRUNCATE starts
    -- the floor over by itself: crier.claim_floor_truncated), and new ids may be under it.
    SELECT s.last_value, s.is_called INTO v_last, v_called FROM crier.events_id_seq s;
    v_next := CASE WHEN v_called THEN v_last + 1 ELSE v_last END;
    IF (SELECT s.seqcache FROM pg_sequence s WHERE s.seqrelid = 'crier.events_id_seq'::regclass) <> 1
       OR v_next < r.floor OR v_next < r.next_floor THEN
        PERFORM crier.claim_floor_reset(p_lane, now());
        RETURN;
    END IF;
    v_ready := r.next_xmax IS NOT NULL AND pg_snapshot_xmin(pg_current_snapshot()) >= r.next_xmax;
    -- One statement, one snapshot, taken after the test above: the lane's lowest pending id
    -- (from its first id: the walk this floor spares the claims, once a second), and the
    -- lowered marks that this snapshot's pending events account for.
    WITH low AS (
        SELECT e.id FROM crier.events e
        WHERE e.state = 'pending' AND e.lane >= p_lane AND e.lane <= p_lane
        ORDER BY e.lane, e.id LIMIT 1
    ), gone AS (
        DELETE FROM crier.claim_floor_lowered l WHERE l.lane = p_lane RETURNING l.id
    )
    SELECT least(CASE WHEN v_ready THEN r.next_floor ELSE r.floor END,
                 (SELECT low.id FROM low), (SELECT min(gone.id) FROM gone))
    INTO v_floor;
    IF v_ready OR r.next_xmax IS NULL THEN
        -- a new candidate: the sequence first (read above), then the snapshot (statements in
        -- that order)
        r.next_floor := v_next;
        SELECT pg_snapshot_xmax(pg_current_snapshot()) INTO r.next_xmax;
    END IF;
    UPDATE crier.claim_floor f
    SET floor = v_floor, next_floor = r.next_floor, next_xmax = r.next_xmax, refreshed_at = now()
    WHERE f.lane = p_lane;
END
$$;
