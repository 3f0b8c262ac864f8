-- fire_timers.sql — crier.fire_timers: the timer workers' claim. Takes up to p_limit due
-- timers (FOR UPDATE SKIP LOCKED, earliest first) and fires those that need no rules in
-- place — delays (crier.fire_delay), marked fired with their outcome — returning one row
-- each (kind 'delay'). A digest timer needs its message rendered by the rules: its digest
-- is locked (SKIP LOCKED: an item joining it holds it for a moment; kind 'busy', tried
-- again soon) and returned (kind 'digest') with what the rules need (input: JSON for
-- gen:render_digest) and what its notification's key is made of; the caller renders it
-- and calls crier.flush_digests in the same transaction. A digest already sent only marks
-- its timer fired.
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
    v_outcome text;
    v_items jsonb;
    v_recipient jsonb;
    v_last bigint;
BEGIN
    -- the delays first: a delayed delivery released into a digest joins it (or, past its
    -- window's end, the next window) before the digest's items are gathered below
    FOR t IN
        SELECT c.* FROM (
            SELECT tm.id, tm.kind, tm.delivery_id, tm.digest_id, tm.due_at FROM crier.timers tm
            WHERE tm.state = 'pending' AND tm.due_at <= v_now
            ORDER BY tm.due_at LIMIT p_limit
            FOR UPDATE SKIP LOCKED) c
        ORDER BY c.kind = 'digest', c.due_at
    LOOP
        timer_id := t.id; kind := t.kind; digest_id := t.digest_id;
        tenant := NULL; event_type := NULL; digest_key := NULL; recipient_id := NULL; channel := NULL;
        discriminator := NULL; last_event_id := NULL; outcome := NULL; input := NULL;
        IF t.kind = 'delay' THEN
            v_outcome := crier.fire_delay(t.delivery_id);
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
