-- events_waiting.sql — crier.events_waiting: whether a claim of the lane would find an event
-- (crier.claim_events' condition, from the lane's floor): the probe an awake daemon sends every few ms between
-- batches (src/engine/wake.c). Through events_pending_lane whatever the statistics say: as a
-- plain statement it was planned on every call, and from the statistics of a tiny table (a
-- new database, before autovacuum's next round) that plan was a sequential scan of every
-- event, done ones included (tests/integration/plans_stable.sh).
CREATE OR REPLACE FUNCTION crier.events_waiting(p_lane smallint) RETURNS boolean
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
DECLARE
    v_floor bigint := crier.claim_floor(p_lane);
BEGIN
    RETURN EXISTS (SELECT 1 FROM crier.events e
                   WHERE e.state = 'pending' AND e.available_at <= now() AND (e.lane, e.id) >= (p_lane, v_floor)
                     AND e.lane <= p_lane);
END
$$;
