-- digest_join.sql — crier.digest_join: the digest window an item joins, for (tenant,
-- recipient, channel, digest key): the open one, locked (FOR UPDATE) and counted; or a
-- new one (the first item opens it: window = p_window seconds from now; or the fixed
-- window of p_every seconds that contains now, aligned to the Unix epoch in the
-- recipient's local time when p_zone names a time zone — every = 1 day runs from local
-- midnight to local midnight, 23 or 25 hours on DST days — else in UTC; never one that
-- already had a digest). Reaching p_max_items closes the window and makes its timer
-- due at once; an open window whose end has passed (its flush has not run yet) is closed
-- and the item opens the next one, so a window holds exactly the items that arrived in it. Concurrent joiners meet on the unique index of open windows: the loser of
-- an insert race joins the winner's window. A window being flushed holds its row lock
-- until the flush commits; the item then opens the next window. Returns the digest's id.
DROP FUNCTION IF EXISTS crier.digest_join(text, text, text, text, text, double precision, double precision, integer);
CREATE OR REPLACE FUNCTION crier.digest_join(p_tenant text, p_recipient text, p_channel text, p_key text,
                                             p_event_type text, p_window double precision,
                                             p_every double precision, p_max_items integer,
                                             p_zone text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_items integer;
    v_now timestamptz;
    v_prev timestamptz;
    v_start timestamptz;
    v_end timestamptz;
    v_zone text := coalesce(p_zone, 'UTC');
    v_local double precision;
BEGIN
    IF p_every IS NOT NULL AND v_zone <> 'UTC' THEN
        BEGIN
            PERFORM clock_timestamp() AT TIME ZONE v_zone;
        EXCEPTION WHEN invalid_parameter_value THEN
            v_zone := 'UTC';
        END;
    END IF;
    LOOP
        SELECT id, items, window_end INTO v_id, v_items, v_end FROM crier.digests
        WHERE tenant = p_tenant AND recipient_id = p_recipient AND channel = p_channel AND digest_key = p_key
          AND state = 'open'
        FOR UPDATE;
        IF FOUND AND v_end <= clock_timestamp() THEN
            -- its window is over (the flush has not run yet): closed; the item opens the next one
            UPDATE crier.digests SET state = 'closed' WHERE id = v_id;
            CONTINUE;
        ELSIF FOUND THEN
            IF p_max_items IS NOT NULL AND v_items + 1 >= p_max_items THEN
                UPDATE crier.digests SET items = items + 1, state = 'closed' WHERE id = v_id;
                UPDATE crier.timers SET due_at = least(due_at, clock_timestamp())
                WHERE digest_id = v_id AND state = 'pending';
            ELSE
                UPDATE crier.digests SET items = items + 1 WHERE id = v_id;
            END IF;
            RETURN v_id;
        END IF;

        v_now := clock_timestamp();
        SELECT max(window_start) INTO v_prev FROM crier.digests
        WHERE tenant = p_tenant AND recipient_id = p_recipient AND channel = p_channel AND digest_key = p_key;
        IF p_every IS NOT NULL THEN
            -- aligned in local time: the wall clock's seconds since 1970-01-01 00:00, and back
            v_local := extract(epoch FROM v_now AT TIME ZONE v_zone);
            v_start := (to_timestamp(floor(v_local / p_every) * p_every) AT TIME ZONE 'UTC') AT TIME ZONE v_zone;
            IF v_prev IS NOT NULL AND v_start <= v_prev THEN
                v_start := v_prev + interval '1 microsecond';
            END IF;
            v_local := extract(epoch FROM v_start AT TIME ZONE v_zone);
            v_end := (to_timestamp((floor(v_local / p_every) + 1) * p_every) AT TIME ZONE 'UTC') AT TIME ZONE v_zone;
            IF v_end <= v_now THEN -- (a boundary inside a DST gap or fold: never a window in the past)
                v_end := v_now + make_interval(secs => p_every);
            END IF;
        ELSE
            v_start := v_now;
            IF v_prev IS NOT NULL AND v_start <= v_prev THEN
                v_start := v_prev + interval '1 microsecond';
            END IF;
            v_end := v_start + make_interval(secs => p_window);
        END IF;
        INSERT INTO crier.digests (tenant, recipient_id, channel, digest_key, event_type, window_start, window_end,
                                   max_items, items, state)
        VALUES (p_tenant, p_recipient, p_channel, p_key, p_event_type, v_start, v_end, p_max_items, 1,
                CASE WHEN p_max_items IS NOT NULL AND p_max_items <= 1 THEN 'closed' ELSE 'open' END)
        ON CONFLICT DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            INSERT INTO crier.timers (key, tenant, kind, due_at, digest_id)
            VALUES (crier.timer_key(ARRAY['digest', v_id::text]), p_tenant, 'digest',
                    CASE WHEN p_max_items IS NOT NULL AND p_max_items <= 1 THEN v_now ELSE v_end END, v_id);
            RETURN v_id;
        END IF;
        -- another transaction opened a window first (or took this start): join or follow it
    END LOOP;
END
$$;
