-- release_delivery.sql — crier.release_delivery: what happens to a delivery once nothing
-- holds it any more (at fan-out, or when its delay ended and its conditions passed), by
-- its timing (lua/crier/timing.lua): quiet hours (timing.quiet: the recipient's periods and
-- zone) that contain now hold it — state held, due when they end
-- (crier.quiet_hours_end), with a timer whose outcome reads 'quiet hours' until it fires
-- and brings the delivery back here — unless it has a digest, which it joins at once (the
-- digest is sent when the quiet hours end, crier.fire_timers); a throttle lets it go now if fewer than limit sends
-- of the same throttle key went out in the last period, else suppresses it with the
-- reason — or, when it also has a digest, lets it join the digest; a digest collects it
-- (crier.digest_join); otherwise it is due now. The throttle key's count is serialised by
-- a transaction-level advisory lock, so concurrent workers and rows of one batch count
-- exactly. Returns 'pending', 'throttled', 'digested' or 'quiet'.
CREATE OR REPLACE FUNCTION crier.release_delivery(p_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    d record;
    v_throttle jsonb;
    v_digest jsonb;
    v_key uuid;
    v_now timestamptz;
    v_sent integer;
    v_digest_id bigint;
    v_quiet_end timestamptz;
BEGIN
    SELECT dl.id, dl.tenant, dl.channel, dl.timing, n.recipient_id, n.event_type INTO d
    FROM crier.deliveries dl JOIN crier.notifications n ON n.id = dl.notification_id
    WHERE dl.id = p_id;
    v_throttle := d.timing->'throttle';
    v_digest := d.timing->'digest';
    IF d.timing ? 'quiet' AND v_digest IS NULL THEN
        v_quiet_end := crier.quiet_hours_end(clock_timestamp(), d.timing->'quiet'->>'zone',
                                             d.timing->'quiet'->'hours');
        IF v_quiet_end IS NOT NULL THEN
            UPDATE crier.deliveries SET state = 'held', due_at = v_quiet_end WHERE id = p_id;
            INSERT INTO crier.timers (key, tenant, kind, due_at, delivery_id, outcome)
            VALUES (crier.timer_key(ARRAY['quiet', p_id::text, v_quiet_end::text]), d.tenant, 'delay', v_quiet_end,
                    p_id, 'quiet hours')
            ON CONFLICT (key) DO NOTHING;
            RETURN 'quiet';
        END IF;
    END IF;
    IF v_throttle IS NOT NULL AND v_digest IS NOT NULL AND d.timing ? 'quiet'
       AND crier.quiet_hours_end(clock_timestamp(), d.timing->'quiet'->>'zone', d.timing->'quiet'->'hours')
           IS NOT NULL THEN
        -- in quiet hours nothing is sent by itself: the item joins the digest
        v_throttle := NULL;
    END IF;
    IF v_throttle IS NOT NULL THEN
        v_key := crier.timer_key(ARRAY['throttle', d.tenant, d.recipient_id, d.channel, v_throttle->>'key']);
        -- (the two-integer advisory lock space: apart from the fan-out's bigint event locks)
        PERFORM pg_advisory_xact_lock(1953, hashtext(v_key::text));
        v_now := clock_timestamp();
        DELETE FROM crier.throttle_hits
        WHERE key = v_key AND at <= v_now - make_interval(secs => (v_throttle->>'per')::double precision);
        SELECT count(*) INTO v_sent FROM crier.throttle_hits WHERE key = v_key;
        IF v_sent < (v_throttle->>'limit')::integer THEN
            INSERT INTO crier.throttle_hits (key, at, delivery_id) VALUES (v_key, v_now, p_id);
            UPDATE crier.deliveries SET state = 'pending', due_at = now() WHERE id = p_id;
            RETURN 'pending';
        END IF;
        IF v_digest IS NULL THEN
            UPDATE crier.deliveries SET state = 'suppressed',
                last_error = format('throttled: %s %s already sent to %s for throttle key %s in the last %s s '
                                    || '(throttle = { limit = %s, per = %s s })',
                                    v_sent, d.channel, d.recipient_id, v_throttle->>'key', v_throttle->>'per',
                                    v_throttle->>'limit', v_throttle->>'per')
            WHERE id = p_id;
            RETURN 'throttled';
        END IF;
    END IF;
    IF v_digest IS NOT NULL THEN
        v_digest_id := crier.digest_join(d.tenant, d.recipient_id, d.channel, v_digest->>'key', d.event_type,
                                         (v_digest->>'window')::double precision,
                                         (v_digest->>'every')::double precision,
                                         (v_digest->>'max_items')::integer, v_digest->>'zone');
        UPDATE crier.deliveries SET state = 'digested', digest_id = v_digest_id WHERE id = p_id;
        RETURN 'digested';
    END IF;
    UPDATE crier.deliveries SET state = 'pending', due_at = now() WHERE id = p_id;
    RETURN 'pending';
END
$$;
