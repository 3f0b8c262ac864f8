-- fire_timers.sql — crier.fire_timers: the timer workers' claim. Takes up to p_limit due
-- timers (FOR UPDATE SKIP LOCKED, earliest first) and fires those that need no rules in
-- place — delays, marked fired with their outcome — returning one row each (kind 'delay').
-- The delays are fired for the whole batch at once: plain ones (the common case) released
-- and their timers fired by one statement; the others decided together
-- (crier.delay_decisions: locks, the unless / cancel_on conditions, the same rules and
-- reasons as crier.fire_delay) and applied by one statement for the deliveries and one
-- for their timers; only a delay released into a throttle or a digest goes through
-- crier.release_delivery, one at a time in the claim's order (as does the odd delay that
-- shares its delivery with another timer of the batch, or has none: crier.fire_delay).
-- A digest timer due inside its recipient's quiet hours is postponed to their end
-- (crier.quiet_hours_end; kind 'delay', its outcome says so). A digest timer needs its message rendered by the rules: its digest is locked (SKIP
-- LOCKED: an item joining it holds it for a moment; kind 'busy', tried again soon), closed
-- to new items (the delays of the pass fire before it) and returned (kind 'digest') with what the rules need (input: JSON for gen:render_digest)
-- and what its notification's key is made of; the caller renders it and calls
-- crier.flush_digests in the same transaction. A digest already sent only marks its timer
-- fired.
-- A send timer (a scheduled send, crier.emit's p_not_before) makes its event pending and
-- is marked fired (kind 'send', outcome 'pending'); the sleeping daemons are woken as an
-- emit wakes them (crier.notify_events).
CREATE OR REPLACE FUNCTION crier.fire_timers(p_limit integer)
RETURNS TABLE (timer_id bigint, kind text, digest_id bigint, tenant text, event_type text, digest_key text,
               recipient_id text, channel text, discriminator text, last_event_id bigint, outcome text,
               input text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    t record;
    g record;
    v_now timestamptz := clock_timestamp();
    v_ids bigint[];         -- the claimed timers, in the claim's order, and their columns
    v_kinds text[];
    v_deliveries bigint[];
    v_digests bigint[];
    v_events bigint[];
    v_sent integer;
    v_once bigint[];        -- the deliveries that exactly one delay timer of the batch names, sorted,
    v_once_timers bigint[]; -- that timer, and its place in the claim
    v_once_ords bigint[];
    v_odd_ords bigint[];    -- the places of the other delays (no delivery, or one named twice)
    v_dec_actions text[];   -- crier.delay_decisions for v_once, in the same order
    v_dec_outcomes text[];
    v_released integer;
    v_outcome text;
    v_items jsonb;
    v_recipient jsonb;
    v_last bigint;
    v_quiet jsonb;
    v_quiet_end timestamptz;
BEGIN
    SELECT array_agg(c.id ORDER BY c.due_at, c.id), array_agg(c.kind ORDER BY c.due_at, c.id),
           array_agg(c.delivery_id ORDER BY c.due_at, c.id), array_agg(c.digest_id ORDER BY c.due_at, c.id),
           array_agg(c.event_id ORDER BY c.due_at, c.id)
    INTO v_ids, v_kinds, v_deliveries, v_digests, v_events
    FROM (SELECT tm.id, tm.kind, tm.delivery_id, tm.digest_id, tm.event_id, tm.due_at FROM crier.timers tm
          WHERE tm.state = 'pending' AND tm.due_at <= v_now
          ORDER BY tm.due_at LIMIT p_limit
          FOR UPDATE SKIP LOCKED) c;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    -- Scheduled sends: their events become pending (an event no longer scheduled — there
    -- is none today — is left as it is), their timers fired.
    IF 'send' = ANY(v_kinds) THEN
        RETURN QUERY
        WITH s AS (
            SELECT u.id, u.event_id FROM unnest(v_ids, v_kinds, v_events) AS u(id, kind, event_id)
            WHERE u.kind = 'send'
        ), ev AS (
            UPDATE crier.events e SET state = 'pending', available_at = now()
            FROM s WHERE e.id = s.event_id AND e.state = 'scheduled'
            RETURNING e.id, e.lane
        ), low AS (
            -- below the claim's floor, perhaps: the claim starts there too (claim_floor.sql)
            INSERT INTO crier.claim_floor_lowered (lane, id)
            SELECT f.lane, min(ev.id) FROM ev JOIN crier.claim_floor f ON f.lane = ev.lane GROUP BY f.lane
        ), f AS (
            UPDATE crier.timers tm SET state = 'fired', fired_at = clock_timestamp(), attempts = tm.attempts + 1,
                outcome = CASE WHEN EXISTS (SELECT 1 FROM ev WHERE ev.id = s.event_id) THEN 'pending'
                               ELSE 'nothing to do: the event was not scheduled any more' END
            FROM s WHERE tm.id = s.id
            RETURNING tm.id, tm.outcome
        )
        SELECT f.id, 'send'::text, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
               NULL::text, NULL::bigint, f.outcome, NULL::text
        FROM f;
        GET DIAGNOSTICS v_sent = ROW_COUNT;
        IF v_sent > 0 AND NOT pg_try_advisory_xact_lock_shared(1668442469, 1) THEN
            PERFORM pg_notify('crier_events', '');
        END IF;
    END IF;

    -- Delays: decided and applied for the batch at once. Arrays are zipped by position, or
    -- looked up in a table by its index, never joined to each other or to a CTE: whatever a
    -- plan estimates an array's length to be (a generic plan says 10), no step can turn into
    -- a nested loop over two unindexed sets.
    SELECT array_agg(w.delivery_id ORDER BY w.delivery_id) FILTER (WHERE w.once),
           array_agg(w.id ORDER BY w.delivery_id) FILTER (WHERE w.once),
           array_agg(w.ord ORDER BY w.delivery_id) FILTER (WHERE w.once),
           array_agg(w.ord) FILTER (WHERE NOT w.once)
    INTO v_once, v_once_timers, v_once_ords, v_odd_ords
    FROM (SELECT u.delivery_id, u.id, u.ord,
                 u.delivery_id IS NOT NULL AND count(*) OVER (PARTITION BY u.delivery_id) = 1 AS once
          FROM unnest(v_kinds, v_deliveries, v_ids) WITH ORDINALITY AS u(kind, delivery_id, id, ord)
          WHERE u.kind = 'delay') w;
    IF v_once IS NOT NULL THEN
        -- The common case first: a held delivery with a plain delay (no unless, cancel_on,
        -- throttle or digest key) is released — due now — and its timer fired, in one
        -- statement (the UPDATE locks each row and re-checks it, as crier.fire_delay's FOR
        -- UPDATE does). Whatever it leaves goes the general way below.
        RETURN QUERY
        WITH r AS (
            UPDATE crier.deliveries dl SET state = 'pending', due_at = now()
            FROM crier.timers tm
            WHERE tm.id = ANY(v_once_timers) AND dl.id = tm.delivery_id AND dl.state = 'held'
              AND NOT dl.timing ?| ARRAY['unless', 'cancel_on', 'throttle', 'digest', 'quiet']
            RETURNING tm.id AS timer_id
        ), f AS (
            UPDATE crier.timers tm SET state = 'fired', fired_at = clock_timestamp(), outcome = 'pending',
                attempts = tm.attempts + 1
            FROM r WHERE tm.id = r.timer_id
            RETURNING tm.id, tm.digest_id, tm.outcome
        )
        SELECT f.id, 'delay'::text, f.digest_id, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
               NULL::text, NULL::bigint, f.outcome, NULL::text
        FROM f;
        GET DIAGNOSTICS v_released = ROW_COUNT;
        IF v_released < cardinality(v_once) THEN
            -- the others: their timers are still pending
            SELECT array_agg(x.delivery_id ORDER BY x.delivery_id), array_agg(x.timer_id ORDER BY x.delivery_id),
                   array_agg(x.ord ORDER BY x.delivery_id)
            INTO v_once, v_once_timers, v_once_ords
            FROM unnest(v_once, v_once_timers, v_once_ords) AS x(delivery_id, timer_id, ord)
            WHERE (SELECT tm.state FROM crier.timers tm WHERE tm.id = x.timer_id) = 'pending';
        ELSE
            v_once := NULL;
        END IF;
    END IF;
    IF v_once IS NOT NULL THEN
        SELECT array_agg(d.action ORDER BY d.delivery_id), array_agg(d.outcome ORDER BY d.delivery_id)
        INTO v_dec_actions, v_dec_outcomes
        FROM crier.delay_decisions(v_once) d;
        IF cardinality(v_dec_actions) IS DISTINCT FROM cardinality(v_once) THEN
            RAISE EXCEPTION 'crier.fire_timers: % decisions for % delays', cardinality(v_dec_actions),
                cardinality(v_once);
        END IF;

        UPDATE crier.deliveries dl
        SET state = CASE WHEN x.action = 'suppress' THEN 'suppressed' ELSE 'pending' END,
            last_error = CASE WHEN x.action = 'suppress' THEN x.outcome ELSE dl.last_error END,
            due_at = CASE WHEN x.action = 'release' THEN now() ELSE dl.due_at END
        FROM unnest(v_once, v_dec_actions, v_dec_outcomes) AS x(id, action, outcome)
        WHERE dl.id = x.id AND x.action IN ('suppress', 'release');

        RETURN QUERY
        WITH f AS (
            UPDATE crier.timers tm SET state = 'fired', fired_at = clock_timestamp(), outcome = x.outcome,
                attempts = tm.attempts + 1
            FROM unnest(v_once_timers, v_dec_actions, v_dec_outcomes) AS x(id, action, outcome)
            WHERE tm.id = x.id AND x.action <> 'release_each'
            RETURNING tm.id, tm.digest_id, tm.outcome
        )
        SELECT f.id, 'delay'::text, f.digest_id, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
               NULL::text, NULL::bigint, f.outcome, NULL::text
        FROM f;
    END IF;

    -- One at a time, in the claim's order: delays released into a throttle or a digest (their
    -- conditions passed above), the odd delays, and then the digests — after every delay, so
    -- that a delayed delivery released into a digest of this pass joins it (or, past its
    -- window's end, the next window) before the digest's items are gathered.
    FOR t IN
        SELECT s.id, s.kind, s.delivery_id, v_digests[s.ord] AS digest_id, s.action
        FROM (SELECT u.ord, u.id, u.kind, u.delivery_id, NULL::text AS action
              FROM unnest(v_ids, v_kinds, v_deliveries) WITH ORDINALITY AS u(id, kind, delivery_id, ord)
              WHERE u.kind = 'digest' OR u.ord = ANY(v_odd_ords)
              UNION ALL
              SELECT x.ord, x.id, 'delay', x.delivery_id, x.action
              FROM unnest(v_once_ords, v_once_timers, v_once, v_dec_actions) AS x(ord, id, delivery_id, action)
              WHERE x.action = 'release_each') s
        ORDER BY s.kind = 'digest', s.ord
    LOOP
        timer_id := t.id; kind := t.kind; digest_id := t.digest_id;
        tenant := NULL; event_type := NULL; digest_key := NULL; recipient_id := NULL; channel := NULL;
        discriminator := NULL; last_event_id := NULL; outcome := NULL; input := NULL;
        IF t.kind = 'delay' THEN
            IF t.action = 'release_each' THEN
                v_outcome := crier.release_delivery(t.delivery_id);
            ELSE
                v_outcome := crier.fire_delay(t.delivery_id);
            END IF;
            UPDATE crier.timers SET state = 'fired', fired_at = clock_timestamp(), outcome = v_outcome,
                attempts = attempts + 1
            WHERE id = t.id;
            outcome := v_outcome;
            RETURN NEXT;
            CONTINUE;
        END IF;

        SELECT * INTO g FROM crier.digests dg WHERE dg.id = t.digest_id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            kind := 'busy';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF g.state = 'sent' THEN
            UPDATE crier.timers SET state = 'fired', fired_at = clock_timestamp(),
                outcome = 'nothing to do: the digest was already sent'
            WHERE id = t.id;
            kind := 'delay'; -- (fired in place)
            outcome := 'nothing to do: the digest was already sent';
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- quiet hours: a digest due inside its recipient's (those its newest item carried) is
        -- sent when they end; its window stays as it was (an item arriving after the window's
        -- end opens the next window, crier.digest_join)
        SELECT dl.timing->'quiet' INTO v_quiet FROM crier.deliveries dl
        WHERE dl.digest_id = g.id AND dl.state = 'digested' ORDER BY dl.id DESC LIMIT 1;
        v_quiet_end := crier.quiet_hours_end(v_now, v_quiet->>'zone', v_quiet->'hours');
        IF v_quiet_end IS NOT NULL THEN
            UPDATE crier.timers SET due_at = v_quiet_end, outcome = 'quiet hours' WHERE id = t.id;
            kind := 'delay'; -- (nothing to render now)
            outcome := 'quiet hours: the digest is due at ' || v_quiet_end;
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- gathered: no item joins it any more in this transaction either
        UPDATE crier.digests SET state = 'closed' WHERE id = g.id AND state = 'open';
        SELECT jsonb_agg(jsonb_build_object('id', e.id, 'type', e.event_type, 'entity_id', e.entity_id,
                                            'payload', e.payload, 'created_at',
                                            to_char(n.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                         ORDER BY dl.id),
               (array_agg(dl.timing->'digest'->'recipient' ORDER BY dl.id DESC))[1],
               (array_agg(e.id ORDER BY dl.id DESC))[1]
        INTO v_items, v_recipient, v_last
        FROM crier.deliveries dl
        JOIN crier.notifications n ON n.id = dl.notification_id
        JOIN crier.events e ON e.id = n.event_id
        WHERE dl.digest_id = g.id AND dl.state = 'digested';
        IF v_items IS NULL THEN
            -- (only a hand-made window can have no items: nothing to send)
            UPDATE crier.digests SET state = 'sent', sent_at = clock_timestamp() WHERE id = g.id;
            UPDATE crier.timers SET state = 'fired', fired_at = clock_timestamp(),
                outcome = 'nothing to do: the digest has no items'
            WHERE id = t.id;
            kind := 'delay'; -- (fired in place)
            outcome := 'nothing to do: the digest has no items';
            RETURN NEXT;
            CONTINUE;
        END IF;
        tenant := g.tenant; event_type := g.event_type; digest_key := g.digest_key;
        recipient_id := g.recipient_id; channel := g.channel; last_event_id := v_last;
        discriminator := 'digest:' || g.channel || ':'
            || to_char(g.window_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
        input := jsonb_build_object(
            'tenant', g.tenant, 'event_type', g.event_type, 'channel', g.channel,
            'recipient', coalesce(v_recipient, jsonb_build_object('id', g.recipient_id)),
            'digest', jsonb_build_object('id', g.id, 'key', g.digest_key,
                'window_start', to_char(g.window_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                'window_end', to_char(g.window_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
            'items', coalesce(v_items, '[]'::jsonb))::text;
        RETURN NEXT;
    END LOOP;
END
$$;
