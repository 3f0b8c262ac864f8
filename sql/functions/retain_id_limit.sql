-- retain_id_limit.sql — crier.retain_id_limit: where crier.retain's walk of a kind's ids
-- stops: the lowest id from which on every row was created at or after p_cutoff, found by a
-- binary search over the primary key (about 30 index probes for a billion ids; ids grow with
-- created_at, as a sequence hands them out). A row can only be past its period when it was
-- created before the cutoff (it finished after it was created), so the walk reads the rows
-- that may be deleted and not the whole period's worth behind them: without this limit each
-- batch walked to the end of the table looking for more (a sequential scan of 1,000,000 events
-- still within their period, 200-265 ms per call, every pass; docs/BENCHMARKS.md). Kinds:
-- events, deliveries, timers. NULL when the table is empty; the highest id + 1 when every
-- row is older than the cutoff. A row whose created_at is out of order (a long transaction)
-- may wait a pass or two past its period; it is never deleted early (crier.retain still
-- checks each row's own time).
CREATE OR REPLACE FUNCTION crier.retain_id_limit(p_kind text, p_cutoff timestamptz) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_lo bigint;
    v_hi bigint;
    v_mid bigint;
    v_at timestamptz;
BEGIN
    -- the first id, and the last one with its time
    CASE p_kind
    WHEN 'events' THEN
        SELECT id INTO v_lo FROM crier.events ORDER BY id LIMIT 1;
        SELECT id, created_at INTO v_hi, v_at FROM crier.events ORDER BY id DESC LIMIT 1;
    WHEN 'deliveries' THEN
        SELECT id INTO v_lo FROM crier.deliveries ORDER BY id LIMIT 1;
        SELECT id, created_at INTO v_hi, v_at FROM crier.deliveries ORDER BY id DESC LIMIT 1;
    WHEN 'timers' THEN
        SELECT id INTO v_lo FROM crier.timers ORDER BY id LIMIT 1;
        SELECT id, created_at INTO v_hi, v_at FROM crier.timers ORDER BY id DESC LIMIT 1;
    ELSE
        RAISE EXCEPTION 'crier.retain_id_limit: unknown kind %', quote_literal(p_kind) USING ERRCODE = '22023';
    END CASE;
    IF v_hi IS NULL THEN
        RETURN NULL;
    END IF;
    IF v_at < p_cutoff THEN
        RETURN v_hi + 1;
    END IF;
    -- the lowest v in [lo, hi] whose first row at or after it was created at or after the
    -- cutoff (the row at hi was)
    WHILE v_lo < v_hi LOOP
        v_mid := v_lo + (v_hi - v_lo) / 2;
        CASE p_kind
        WHEN 'events' THEN
            SELECT created_at INTO v_at FROM crier.events WHERE id >= v_mid ORDER BY id LIMIT 1;
        WHEN 'deliveries' THEN
            SELECT created_at INTO v_at FROM crier.deliveries WHERE id >= v_mid ORDER BY id LIMIT 1;
        ELSE
            SELECT created_at INTO v_at FROM crier.timers WHERE id >= v_mid ORDER BY id LIMIT 1;
        END CASE;
        IF v_at >= p_cutoff THEN
            v_hi := v_mid;
        ELSE
            v_lo := v_mid + 1;
        END IF;
    END LOOP;
    RETURN v_lo;
END
$$;
