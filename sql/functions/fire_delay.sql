-- fire_delay.sql — crier.fire_delay: a delayed delivery's delay is over. It is dropped
-- (state suppressed, with the reason) when its condition says so — unless = 'read' /
-- 'seen' and the same notification's feed item is read / seen (explicitly or by a
-- mark-all watermark), or an event of a cancel_on type arrived for the same tenant and
-- entity after the notification's event — and otherwise released
-- (crier.release_delivery: throttle, digest or due now). A delivery no longer held (a
-- replay, an operator) is left alone. Returns what it did, for the timer's outcome.
CREATE OR REPLACE FUNCTION crier.fire_delay(p_delivery_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    d record;
    v_read boolean;
    v_seen boolean;
    v_cancel record;
    v_reason text;
BEGIN
    SELECT dl.id, dl.state, dl.timing, dl.notification_id, n.tenant, n.entity_id, n.event_id INTO d
    FROM crier.deliveries dl JOIN crier.notifications n ON n.id = dl.notification_id
    WHERE dl.id = p_delivery_id
    FOR UPDATE OF dl;
    IF NOT FOUND THEN
        RETURN 'nothing to do: the delivery is gone';
    ELSIF d.state <> 'held' THEN
        RETURN 'nothing to do: the delivery is ' || d.state;
    END IF;

    IF d.timing->>'unless' IS NOT NULL THEN
        SELECT coalesce(s.read, crier.feed_covered(i.id, i.txid, w.read_snapshot, w.read_upto)),
               coalesce(s.seen, CASE WHEN s.read THEN true END,
                        crier.feed_covered(i.id, i.txid, w.seen_snapshot, w.seen_upto))
        INTO v_read, v_seen
        FROM crier.feed_items i
        LEFT JOIN crier.feed_states s ON s.tenant = i.tenant AND s.recipient_id = i.recipient_id AND s.item_id = i.id
        LEFT JOIN crier.feed_watermarks w ON w.tenant = i.tenant AND w.recipient_id = i.recipient_id
        WHERE i.notification_id = d.notification_id;
        IF d.timing->>'unless' = 'read' AND v_read THEN
            v_reason := 'cancelled: the feed item was read within the delay (unless = "read")';
        ELSIF d.timing->>'unless' = 'seen' AND (v_seen OR v_read) THEN
            v_reason := 'cancelled: the feed item was seen within the delay (unless = "seen")';
        END IF;
    END IF;

    IF v_reason IS NULL AND d.timing ? 'cancel_on' THEN
        SELECT e.id, e.event_type INTO v_cancel FROM crier.events e
        WHERE e.tenant = d.tenant AND e.entity_id = d.entity_id
          AND e.event_type IN (SELECT jsonb_array_elements_text(d.timing->'cancel_on'))
          AND e.id > d.event_id
        ORDER BY e.id LIMIT 1;
        IF FOUND THEN
            v_reason := format('cancelled: event %s (%s) arrived for %s within the delay (cancel_on)',
                               v_cancel.id, v_cancel.event_type, d.entity_id);
        END IF;
    END IF;

    IF v_reason IS NOT NULL THEN
        UPDATE crier.deliveries SET state = 'suppressed', last_error = v_reason WHERE id = p_delivery_id;
        RETURN v_reason;
    END IF;
    RETURN crier.release_delivery(p_delivery_id);
END
$$;
