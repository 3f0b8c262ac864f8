-- fire_schedules.sql — crier.fire_schedules: the recurring schedules' part of a timer pass
-- (src/engine/timers.c, in the pass's transaction). p_defs is what the daemon's rules declare
-- (crier.schedule; gen:schedules_json: [{name, cron, time_zone, tenants, event_type, entity,
-- payload, catch_up}]). For each (schedule, tenant):
--   * not in crier.schedules yet: registered, its first occurrence the next one after now
--     (no backlog for a schedule seen for the first time);
--   * its cron or time zone differ from the row's (the rule changed, or daemons run two rules
--     versions): this definition's occurrences after the last one handled are the due ones
--     (with the schedule's catch-up), and the row takes this definition when it fires;
--   * due (next_occurrence <= now): the row is locked FOR UPDATE SKIP LOCKED (a row another
--     daemon is firing is skipped: it fires it), and each occurrence up to now is walked:
--     catch_up 'each' emits every one (at most the 100 latest; older ones are skipped and
--     counted), 'latest' the latest only. Each emit goes through crier.emit with the dedupe
--     key 'schedule:' || name || ':' || the occurrence (RFC 3339 UTC), the entity id
--     entity || ':' || the occurrence (each occurrence its own notifications) and the
--     schedule's payload plus schedule and occurrence; so an occurrence is one event, whatever
--     daemons race. The row moves on (last occurrence handled, next one) in the same
--     transaction.
-- A schedule whose work fails (an unknown zone, an emit refused) rolls back alone (a
-- subtransaction): its row keeps last_error and is tried again 30 s later (retry_after); one
-- that cannot even compute its first occurrence is registered without one (next_occurrence
-- NULL, last_error set) until its definition changes.
-- Returns one row per schedule and tenant it did something for.
CREATE OR REPLACE FUNCTION crier.fire_schedules(p_defs jsonb)
RETURNS TABLE (name text, tenant text, emitted integer, skipped integer, next_occurrence timestamptz, outcome text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    d record;
    s record;
    v_now timestamptz := clock_timestamp();
    v_occ timestamptz;
    v_first timestamptz;
    v_ring timestamptz[];
    v_steps integer;
    v_total integer;
    v_emit timestamptz[];
    v_id bigint;
    v_iso text;
    v_err text;
    c_max_each constant integer := 100;   -- catch_up 'each': at most this many occurrences per pass
    c_max_walk constant integer := 10000; -- occurrences walked before estimating where the latest start
BEGIN
    IF p_defs IS NULL OR jsonb_typeof(p_defs) <> 'array' OR jsonb_array_length(p_defs) = 0 THEN
        RETURN;
    END IF;
    FOR d IN
        SELECT x.name, x.cron, x.time_zone, x.event_type, x.entity, coalesce(x.payload, '{}'::jsonb) AS payload,
               x.catch_up, t.tenant,
               sc.name IS NULL AS missing
        FROM jsonb_to_recordset(p_defs) AS x(name text, cron text, time_zone text, event_type text, entity text,
                                             payload jsonb, catch_up text, tenants jsonb)
        CROSS JOIN LATERAL jsonb_array_elements_text(x.tenants) AS t(tenant)
        LEFT JOIN crier.schedules sc ON sc.name = x.name AND sc.tenant = t.tenant
        WHERE sc.name IS NULL OR sc.cron <> x.cron OR sc.time_zone <> x.time_zone
           OR (sc.next_occurrence <= v_now AND coalesce(sc.retry_after, '-infinity') <= v_now)
        ORDER BY x.name, t.tenant
    LOOP
        name := d.name; tenant := d.tenant; emitted := 0; skipped := 0; next_occurrence := NULL; outcome := NULL;
        BEGIN
            IF d.missing THEN
                INSERT INTO crier.schedules AS sc (name, tenant, cron, time_zone, event_type, catch_up,
                                                   next_occurrence)
                VALUES (d.name, d.tenant, d.cron, d.time_zone, d.event_type, d.catch_up,
                        crier.cron_next(d.cron, d.time_zone, v_now))
                ON CONFLICT ON CONSTRAINT schedules_pkey DO NOTHING
                RETURNING sc.next_occurrence INTO next_occurrence;
                IF FOUND THEN
                    outcome := 'registered';
                    RETURN NEXT;
                END IF;
                CONTINUE;
            END IF;
            SELECT * INTO s FROM crier.schedules sc WHERE sc.name = d.name AND sc.tenant = d.tenant
            FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                CONTINUE; -- another daemon is on it
            END IF;
            IF s.cron <> d.cron OR s.time_zone <> d.time_zone THEN
                -- another definition (the rule changed, or daemons run two rules versions): this
                -- one's occurrences after the last one handled
                v_occ := crier.cron_next(d.cron, d.time_zone, coalesce(s.last_occurrence, s.created_at));
            ELSE
                v_occ := s.next_occurrence;
            END IF;
            IF v_occ IS NULL OR v_occ > v_now OR coalesce(s.retry_after, '-infinity') > v_now THEN
                CONTINUE; -- not due (fired by another daemon meanwhile, or this definition's time is later)
            END IF;
            -- the occurrences due: the last c_max_each of them in v_ring
            v_first := v_occ;
            v_ring := '{}';
            v_steps := 0;
            WHILE v_occ IS NOT NULL AND v_occ <= v_now AND v_steps < c_max_walk LOOP
                v_ring := v_ring || v_occ;
                IF cardinality(v_ring) > c_max_each THEN
                    v_ring := v_ring[2:];
                END IF;
                v_steps := v_steps + 1;
                v_occ := crier.cron_next(d.cron, d.time_zone, v_occ);
            END LOOP;
            v_total := v_steps;
            IF v_occ IS NOT NULL AND v_occ <= v_now THEN
                -- a long backlog: walk again from where its last c_max_each should start
                v_occ := crier.cron_next(d.cron, d.time_zone,
                    v_now - (v_occ - v_first) / v_steps * (c_max_each + 1));
                v_ring := '{}';
                v_total := v_total + 1; -- (at least: the skipped count is a lower bound)
                WHILE v_occ IS NOT NULL AND v_occ <= v_now LOOP
                    v_ring := v_ring || v_occ;
                    IF cardinality(v_ring) > c_max_each THEN
                        v_ring := v_ring[2:];
                    END IF;
                    v_occ := crier.cron_next(d.cron, d.time_zone, v_occ);
                END LOOP;
                v_total := greatest(v_total, cardinality(v_ring));
            END IF;
            v_emit := CASE WHEN d.catch_up = 'latest' THEN ARRAY[v_ring[cardinality(v_ring)]] ELSE v_ring END;
            FOREACH v_occ IN ARRAY v_emit LOOP
                v_iso := to_char(v_occ AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"');
                v_id := crier.emit(d.tenant, d.event_type, coalesce(d.entity, d.name) || ':' || v_iso,
                                   d.payload || jsonb_build_object('schedule', d.name, 'occurrence', v_iso),
                                   'schedule:' || d.name || ':' || v_iso);
                emitted := emitted + 1;
            END LOOP;
            skipped := v_total - emitted;
            next_occurrence := crier.cron_next(d.cron, d.time_zone, greatest(v_ring[cardinality(v_ring)], v_now));
            UPDATE crier.schedules sc SET last_occurrence = v_ring[cardinality(v_ring)],
                next_occurrence = fire_schedules.next_occurrence, last_event_id = v_id,
                cron = d.cron, time_zone = d.time_zone,
                last_fired_at = clock_timestamp(), event_type = d.event_type, catch_up = d.catch_up,
                last_error = NULL, retry_after = NULL, seen_at = now()
            WHERE sc.name = d.name AND sc.tenant = d.tenant;
            outcome := 'fired';
            RETURN NEXT;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_err = MESSAGE_TEXT;
            INSERT INTO crier.schedules AS sc (name, tenant, cron, time_zone, event_type, catch_up, next_occurrence,
                                               last_error, retry_after)
            VALUES (d.name, d.tenant, d.cron, d.time_zone, d.event_type, d.catch_up, NULL, v_err,
                    v_now + interval '30 seconds')
            ON CONFLICT ON CONSTRAINT schedules_pkey DO UPDATE
            SET last_error = EXCLUDED.last_error, retry_after = EXCLUDED.retry_after,
                cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone;
            emitted := 0; skipped := 0; next_occurrence := NULL;
            outcome := 'failed: ' || v_err;
            RETURN NEXT;
        END;
    END LOOP;
END
$$;
