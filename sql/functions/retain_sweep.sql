-- retain_sweep.sql — crier.retain_sweep: the retention worker's sweep of the rows crier.retain
-- does not walk to, one window of ids per call: events, deliveries and timers from
-- crier.retain_id_limit on, created after the cutoff, are only past their period when their
-- finish time is earlier than their creation says (a row written by hand, a clock set back).
-- Deletes at most p_limit such rows among the ids after p_after (or after the limit, if that is
-- further) and below that plus 10 × p_limit, and returns how many it deleted and where the
-- next call starts (next_after: the last id it deleted when the batch was full, else the
-- window's end; NULL when the window reached the table's end — the sweep starts over at the
-- limit). The worker (src/engine/retention.c) runs one call per kind and pass, so a pass
-- reads at most 10 × --retention-batch ids more per kind; one sweep of a table takes as many
-- passes as it has such windows past the limit.
CREATE OR REPLACE FUNCTION crier.retain_sweep(p_kind text, p_older_than interval, p_limit int, p_after bigint,
                                              OUT deleted int, OUT next_after bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_cutoff timestamptz := now() - p_older_than;
    v_start bigint;
    v_end bigint;
    v_last bigint;
BEGIN
    IF p_older_than IS NULL OR p_older_than < interval '0' OR p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'crier.retain_sweep: the period must be >= 0 and the batch >= 1' USING ERRCODE = '22023';
    END IF;
    IF p_kind NOT IN ('events', 'deliveries', 'timers') THEN
        RAISE EXCEPTION 'crier.retain_sweep: unknown kind % (events, deliveries or timers)', quote_literal(p_kind)
            USING ERRCODE = '22023';
    END IF;
    v_start := greatest(coalesce(p_after, 0), coalesce(crier.retain_id_limit(p_kind, v_cutoff), 1) - 1);
    v_end := v_start + 10 * p_limit::bigint + 1;
    SELECT r.deleted, r.last_id INTO deleted, v_last
    FROM crier.retain_range(p_kind, v_cutoff, p_limit, v_start, v_end) r;
    IF deleted >= p_limit THEN
        next_after := v_last; -- more may wait in this window
    ELSIF (CASE p_kind
           WHEN 'events' THEN EXISTS (SELECT 1 FROM crier.events WHERE id >= v_end)
           WHEN 'deliveries' THEN EXISTS (SELECT 1 FROM crier.deliveries WHERE id >= v_end)
           ELSE EXISTS (SELECT 1 FROM crier.timers WHERE id >= v_end) END) THEN
        next_after := v_end - 1;
    END IF;
END;
$$;
