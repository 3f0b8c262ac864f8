-- retain.sql — crier.retain: deletes one small batch (at most p_limit rows) of finished rows of
-- one kind that finished more than p_older_than ago; returns how many rows it deleted. Called
-- by the retention worker of crier serve (src/engine/retention.c) again and again, one
-- autocommit statement per batch, so no lock is held for long; rows in use are skipped (SKIP
-- LOCKED). Kinds:
--   events         done or dead events (processed_at), except those with audience items: a
--                  read-mode event keeps its row, so its dedupe key keeps its feed items single
--   deliveries     delivered, dead, suppressed and digested deliveries (delivered_at, dead_at,
--                  else created_at), with their attempts
--   timers         fired and dead timers (fired_at, else due_at)
--   digests        sent digests (sent_at) whose items' deliveries are gone
--   throttle_hits  throttle hits (at)
-- Notifications are never deleted here: their keys are the dedupe horizon (docs/OPERATIONS.md).
CREATE OR REPLACE FUNCTION crier.retain(p_kind text, p_older_than interval, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_cutoff timestamptz := now() - p_older_than;
    v_n int;
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
            ORDER BY e.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.events e USING old WHERE e.id = old.id RETURNING 1
        ) SELECT count(*) INTO v_n FROM gone;
    WHEN 'deliveries' THEN
        WITH old AS (
            SELECT d.id FROM crier.deliveries d
            WHERE d.state IN ('delivered', 'dead', 'suppressed', 'digested')
              AND coalesce(d.delivered_at, d.dead_at, d.created_at) < v_cutoff
            ORDER BY d.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), attempts AS (
            DELETE FROM crier.delivery_attempts a USING old WHERE a.delivery_id = old.id
        ), gone AS (
            DELETE FROM crier.deliveries d USING old WHERE d.id = old.id RETURNING 1
        ) SELECT count(*) INTO v_n FROM gone;
    WHEN 'timers' THEN
        WITH old AS (
            SELECT t.id FROM crier.timers t
            WHERE t.state IN ('fired', 'dead') AND coalesce(t.fired_at, t.due_at) < v_cutoff
            ORDER BY t.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.timers t USING old WHERE t.id = old.id RETURNING 1
        ) SELECT count(*) INTO v_n FROM gone;
    WHEN 'digests' THEN
        WITH old AS (
            SELECT g.id FROM crier.digests g
            WHERE g.state = 'sent' AND g.sent_at < v_cutoff
              AND NOT EXISTS (SELECT 1 FROM crier.deliveries d WHERE d.digest_id = g.id)
            ORDER BY g.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.digests g USING old WHERE g.id = old.id RETURNING 1
        ) SELECT count(*) INTO v_n FROM gone;
    WHEN 'throttle_hits' THEN
        WITH old AS (
            SELECT h.ctid FROM crier.throttle_hits h WHERE h.at < v_cutoff
            LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.throttle_hits h USING old WHERE h.ctid = old.ctid RETURNING 1
        ) SELECT count(*) INTO v_n FROM gone;
    ELSE
        RAISE EXCEPTION 'crier.retain: unknown kind %', quote_literal(p_kind) USING ERRCODE = '22023';
    END CASE;
    RETURN v_n;
END;
$$;
