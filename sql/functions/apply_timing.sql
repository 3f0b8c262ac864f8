-- apply_timing.sql — crier.apply_timing: decides the deliveries that the calling fan-out
-- batch inserted in state 'timing' (only the caller's own, uncommitted rows can be in that
-- state) before the batch commits: a delay holds the delivery and creates its timer; the
-- others go through crier.release_delivery (quiet hours, throttle, digest, or due now). Rows are taken
-- in (tenant, recipient, channel, throttle key, digest key) order, so that concurrent
-- batches take the throttle and digest locks in one order. Returns how many deliveries are
-- due now; wakes the timer workers (NOTIFY crier_timers) when it created a timer.
CREATE OR REPLACE FUNCTION crier.apply_timing() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d record;
    v_due timestamptz;
    v_outcome text;
    v_released integer := 0;
    v_timers boolean := false;
BEGIN
    FOR d IN
        SELECT dl.id, dl.tenant, dl.timing
        FROM crier.deliveries dl JOIN crier.notifications n ON n.id = dl.notification_id
        WHERE dl.state = 'timing'
        ORDER BY dl.tenant, n.recipient_id, dl.channel, dl.timing->'throttle'->>'key',
                 dl.timing->'digest'->>'key', dl.id
    LOOP
        IF d.timing ? 'delay' THEN
            v_due := clock_timestamp() + make_interval(secs => (d.timing->>'delay')::double precision);
            UPDATE crier.deliveries SET state = 'held', due_at = v_due WHERE id = d.id;
            INSERT INTO crier.timers (key, tenant, kind, due_at, delivery_id)
            VALUES (crier.timer_key(ARRAY['delay', d.id::text]), d.tenant, 'delay', v_due, d.id)
            ON CONFLICT (key) DO NOTHING;
            v_timers := true;
        ELSE
            v_outcome := crier.release_delivery(d.id);
            IF v_outcome = 'pending' THEN
                v_released := v_released + 1;
            ELSIF v_outcome IN ('digested', 'quiet') THEN
                v_timers := true;
            END IF;
        END IF;
    END LOOP;
    IF v_timers THEN
        PERFORM pg_notify('crier_timers', '');
    END IF;
    RETURN v_released;
END
$$;
