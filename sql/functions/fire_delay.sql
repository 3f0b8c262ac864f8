-- fire_delay.sql — crier.fire_delay: a delayed delivery's delay is over. It is dropped
-- (state suppressed, with the reason) when its condition says so — unless = 'read' /
-- 'seen' and the same notification's feed item is read / seen (explicitly or by a
-- mark-all watermark), or an event of a cancel_on type arrived for the same tenant and
-- entity after the notification's event — and otherwise released
-- (crier.release_delivery: throttle, digest or due now). A delivery no longer held (a
-- replay, an operator) is left alone. Returns what it did, for the timer's outcome. The
-- decision is crier.delay_decisions' (which crier.fire_timers makes for a whole batch).
CREATE OR REPLACE FUNCTION crier.fire_delay(p_delivery_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v record;
BEGIN
    SELECT d.action, d.outcome INTO v FROM crier.delay_decisions(ARRAY[p_delivery_id]) d;
    IF NOT FOUND THEN
        RETURN 'nothing to do: the delivery is gone';
    ELSIF v.action = 'skip' THEN
        RETURN v.outcome;
    ELSIF v.action = 'suppress' THEN
        UPDATE crier.deliveries SET state = 'suppressed', last_error = v.outcome WHERE id = p_delivery_id;
        RETURN v.outcome;
    END IF;
    RETURN crier.release_delivery(p_delivery_id);
END
$$;
