-- retain_range.sql — crier.retain_range: crier.retain's delete of one batch (at most p_limit
-- rows) of one kind's rows that finished before p_cutoff, among the ids after p_after and
-- before p_until (NULL: no end), walked along the primary key: sequential and bitmap scans
-- are off for this function (a plan made for a range the planner thought small was a
-- sequential scan and a sort of the whole table). Returns how many it deleted and the highest
-- id it deleted (NULL when none; always NULL for throttle_hits, which have no id order).
-- Called by crier.retain (the ids up to crier.retain_id_limit) and crier.retain_sweep (a
-- window of ids beyond it); the kinds are crier.retain's.
CREATE OR REPLACE FUNCTION crier.retain_range(p_kind text, p_cutoff timestamptz, p_limit int, p_after bigint,
                                              p_until bigint, OUT deleted int, OUT last_id bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_until bigint := coalesce(p_until, 9223372036854775807);
BEGIN
    CASE p_kind
    WHEN 'events' THEN
        -- (crier.check_event_children lets this transaction retire referenced events)
        PERFORM set_config('crier.retention', 'on', true);
        WITH old AS (
            SELECT e.id FROM crier.events e
            WHERE e.state IN ('done', 'dead') AND e.processed_at < p_cutoff
              AND NOT EXISTS (SELECT 1 FROM crier.audience_items a WHERE a.event_id = e.id)
              AND e.id > p_after AND e.id < v_until
            ORDER BY e.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.events e USING old WHERE e.id = old.id RETURNING 1
        ) SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM old) INTO deleted, last_id;
    WHEN 'deliveries' THEN
        WITH old AS (
            SELECT d.id FROM crier.deliveries d
            WHERE d.state IN ('delivered', 'dead', 'suppressed', 'digested')
              AND coalesce(d.delivered_at, d.dead_at, d.created_at) < p_cutoff
              AND d.id > p_after AND d.id < v_until
            ORDER BY d.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), attempts AS (
            DELETE FROM crier.delivery_attempts a USING old WHERE a.delivery_id = old.id
        ), gone AS (
            DELETE FROM crier.deliveries d USING old WHERE d.id = old.id RETURNING 1
        ) SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM old) INTO deleted, last_id;
    WHEN 'timers' THEN
        WITH old AS (
            SELECT t.id FROM crier.timers t
            WHERE t.state IN ('fired', 'dead') AND coalesce(t.fired_at, t.due_at) < p_cutoff
              AND t.id > p_after AND t.id < v_until
            ORDER BY t.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.timers t USING old WHERE t.id = old.id RETURNING 1
        ) SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM old) INTO deleted, last_id;
    WHEN 'digests' THEN
        WITH old AS (
            SELECT g.id FROM crier.digests g
            WHERE g.state = 'sent' AND g.sent_at < p_cutoff
              AND NOT EXISTS (SELECT 1 FROM crier.deliveries d WHERE d.digest_id = g.id)
              AND g.id > p_after AND g.id < v_until
            ORDER BY g.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.digests g USING old WHERE g.id = old.id RETURNING 1
        ) SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM old) INTO deleted, last_id;
    WHEN 'throttle_hits' THEN
        WITH old AS (
            SELECT h.ctid FROM crier.throttle_hits h WHERE h.at < p_cutoff
            LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), gone AS (
            DELETE FROM crier.throttle_hits h USING old WHERE h.ctid = old.ctid RETURNING 1
        ) SELECT count(*), NULL FROM gone INTO deleted, last_id;
    ELSE
        RAISE EXCEPTION 'crier.retain_range: unknown kind %', quote_literal(p_kind) USING ERRCODE = '22023';
    END CASE;
END;
$$;
