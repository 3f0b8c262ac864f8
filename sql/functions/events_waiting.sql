-- events_waiting.sql — crier.events_waiting: whether a claim of the lane would find an event
-- (crier.claim_events' condition, on crier.event_queue: a queue row left by an event that is
-- not pending any more answers true once, and the claim that follows drops it): the probe
-- an awake daemon sends every few ms between batches (src/engine/wake.c). Along the queue's
-- primary key whatever the statistics say: as a plain statement it was planned on every
-- call, and from the statistics of a tiny table (a new database, before autovacuum's next
-- round) that plan was a sequential scan (tests/integration/plans_stable.sh).
CREATE OR REPLACE FUNCTION crier.events_waiting(p_lane smallint) RETURNS boolean
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM crier.event_queue q
                   WHERE q.available_at <= now() AND q.lane >= p_lane AND q.lane <= p_lane);
END
$$;
