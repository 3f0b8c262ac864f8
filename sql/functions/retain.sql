-- retain.sql — crier.retain: deletes one small batch (at most p_limit rows) of finished rows of
-- one kind that finished more than p_older_than ago. Called by the retention worker of crier
-- serve (src/engine/retention.c) again and again, one autocommit statement per batch, so no
-- lock is held for long; rows in use are skipped (SKIP LOCKED). Kinds:
--   events         done or dead events (processed_at), except those with audience items: a
--                  read-mode event keeps its row, so its dedupe key keeps its feed items single
--   deliveries     delivered, dead, suppressed and digested deliveries (delivered_at, dead_at,
--                  else created_at), with their attempts
--   timers         fired and dead timers (fired_at, else due_at)
--   digests        sent digests (sent_at) whose items' deliveries are gone
--   throttle_hits  throttle hits (at)
-- Notifications are never deleted here: their keys are the dedupe horizon (docs/OPERATIONS.md).
--
-- The worker's form takes a cursor: p_after, the last_id of the previous batch of the same
-- pass (0 to start). Batches walk the ids upwards from it instead of from the lowest id: rows
-- deleted by earlier batches stay in the index until vacuum reaches them, and a walk from
-- the start stepped over all of them again, so each batch cost more than the last (150 ->
-- 461 ms per 1,000 deliveries within minutes at 5,000 deliveries/s). last_id is the highest
-- id the batch looked at (NULL for throttle_hits, which have no id order, and when nothing
-- was found); rows it skipped (in use, or not finished yet) wait for the next pass.
-- crier.retain(kind, older_than, limit) is one batch from the start (p_after NULL): it walks
-- the whole table (no limit, below) and returns the count.
--
-- The worker's walk of events, deliveries and timers ends at crier.retain_id_limit, the first id created
-- at or after the cutoff: a row finishes after it is created, so the rows past it cannot be
-- past their period. Without that end each batch read on through every row still within its
-- period looking for more: a sequential scan of the whole table, every batch of every pass
-- (265 ms per call over 1,000,000 events finished a day ago, kept 7 days; 14 ms with it). A
-- row whose finish time is earlier than its creation says (written by hand, a clock set back)
-- is found by crier.retain_sweep, which the worker runs once per kind and pass. The delete
-- itself is crier.retain_range.
CREATE OR REPLACE FUNCTION crier.retain(p_kind text, p_older_than interval, p_limit int, p_after bigint,
                                        OUT deleted int, OUT last_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_cutoff timestamptz := now() - p_older_than;
    v_until bigint;
BEGIN
    IF p_older_than IS NULL OR p_older_than < interval '0' OR p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'crier.retain: the period must be >= 0 and the batch >= 1' USING ERRCODE = '22023';
    END IF;
    IF p_kind IN ('events', 'deliveries', 'timers') AND p_after IS NOT NULL THEN
        v_until := crier.retain_id_limit(p_kind, v_cutoff);
        IF v_until IS NULL OR v_until <= coalesce(p_after, 0) + 1 THEN
            deleted := 0; -- nothing created before the cutoff is left after the cursor
            RETURN;
        END IF;
    ELSIF p_kind NOT IN ('events', 'deliveries', 'timers', 'digests', 'throttle_hits') THEN
        RAISE EXCEPTION 'crier.retain: unknown kind %', quote_literal(p_kind) USING ERRCODE = '22023';
    END IF;
    SELECT r.deleted, r.last_id INTO deleted, last_id
    FROM crier.retain_range(p_kind, v_cutoff, p_limit, coalesce(p_after, 0), v_until) r;
END;
$$;

CREATE OR REPLACE FUNCTION crier.retain(p_kind text, p_older_than interval, p_limit int) RETURNS int
LANGUAGE sql AS $$
    SELECT deleted FROM crier.retain(p_kind, p_older_than, p_limit, NULL);
$$;
