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
-- crier.retain(kind, older_than, limit) is one batch from the start: it returns the count.
CREATE OR REPLACE FUNCTION crier.retain(p_kind text, p_older_than interval, p_limit int, p_after bigint,
                                        OUT deleted int, OUT last_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_cutoff timestamptz := now() - p_older_than;
    v_after bigint := coalesce(p_after, 0);
BEGIN
    IF p_older_than IS NULL OR p_older_than < interval '0' OR p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'crier.retain: the period must be >= 0 and the batch >= 1' USING ERRCODE = '22023';
    END IF;
    CASE p_kind
    WHEN 'events' THEN
        -- (crier.check_event_children lets this transaction retire referenced events)
        PERFORM set_config('crier.retention', 'on', true);
        WITH old AS (
            SELECT e.id FROM crier.events e
            WHERE e.state IN ('done', 'dead') AND e.processed_at < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM crier.audience_items a WHERE a.event_id = e.id)
              AND e.id > v_after
            ORDER BY e.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.events e USING old WHERE e.id = old.id RETURNING 1
        ) SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM old) INTO deleted, last_id;
    WHEN 'deliveries' THEN
        WITH old AS (
            SELECT d.id FROM crier.deliveries d
            WHERE d.state IN ('delivered', 'dead', 'suppressed', 'digested')
              AND coalesce(d.delivered_at, d.dead_at, d.created_at) < v_cutoff
              AND d.id > v_after
            ORDER BY d.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), attempts AS (
            DELETE FROM crier.delivery_attempts a USING old WHERE a.delivery_id = old.id
        ), gone AS (
            DELETE FROM crier.deliveries d USING old WHERE d.id = old.id RETURNING 1
        ) SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM old) INTO deleted, last_id;
    WHEN 'timers' THEN
        WITH old AS (
            SELECT t.id FROM crier.timers t
            WHERE t.state IN ('fired', 'dead') AND coalesce(t.fired_at, t.due_at) < v_cutoff
              AND t.id > v_after
            ORDER BY t.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.timers t USING old WHERE t.id = old.id RETURNING 1
        ) SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM old) INTO deleted, last_id;
    WHEN 'digests' THEN
        WITH old AS (
            SELECT g.id FROM crier.digests g
            WHERE g.state = 'sent' AND g.sent_at < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM crier.deliveries d WHERE d.digest_id = g.id)
              AND g.id > v_after
            ORDER BY g.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.digests g USING old WHERE g.id = old.id RETURNING 1
        ) SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM old) INTO deleted, last_id;
    WHEN 'throttle_hits' THEN
        WITH old AS (
            SELECT h.ctid FROM crier.throttle_hits h WHERE h.at < v_cutoff
            LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.throttle_hits h USING old WHERE h.ctid = old.ctid RETURNING 1
        ) SELECT count(*), NULL FROM gone INTO deleted, last_id;
    ELSE
        RAISE EXCEPTION 'crier.retain: unknown kind %', quote_literal(p_kind) USING ERRCODE = '22023';
    END CASE;
END;
$$;

CREATE OR REPLACE FUNCTION crier.retain(p_kind text, p_older_than interval, p_limit int) RETURNS int
LANGUAGE sql AS $$
    SELECT deleted FROM crier.retain(p_kind, p_older_than, p_limit, 0);
$$;
