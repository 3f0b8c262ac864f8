-- flush_digests.sql — crier.flush_digests: the second half of firing digest timers, in
-- the transaction of crier.fire_timers that locked them. Per digest (arrays, one element
-- each): when its rendering failed (p_error), the timer stays pending and is tried again
-- after a back-off (5 s doubling, at most 5 min), the error in its outcome; otherwise the
-- digest's notification is inserted (its key, computed by the engine from the digest's
-- identity and window, is unique: a second flush of one window adds nothing) with one
-- pending delivery of the rendered message, the digest is marked sent and its timer
-- fired. Returns the number of deliveries queued.
CREATE OR REPLACE FUNCTION crier.flush_digests(
    p_timer_id bigint[], p_digest_id bigint[], p_key_hash uuid[], p_key text[], p_message_id text[],
    p_last_event_id bigint[], p_discriminator text[], p_target text[], p_body text[], p_secret text[],
    p_subject text[], p_html text[], p_sender text[], p_retry text[], p_error text[], p_rules_version text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    g record;
    v_notification bigint;
    v_queued integer := 0;
    v_rows integer;
    v_emitted timestamptz;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_digest_id, 1), 0) LOOP
        IF p_error[i] IS NOT NULL THEN
            UPDATE crier.timers SET attempts = attempts + 1, outcome = 'render failed: ' || p_error[i],
                due_at = clock_timestamp() + make_interval(secs => least(300, 5 * power(2, attempts)))
            WHERE id = p_timer_id[i];
            CONTINUE;
        END IF;
        SELECT * INTO g FROM crier.digests WHERE id = p_digest_id[i];
        -- the notification refers to its last event: locked as a foreign key would lock it
        -- (sql/014: a concurrent DELETE waits, then finds the notification and fails); its
        -- commit time is the digest delivery's emitted_at (sql/025)
        SELECT created_at INTO v_emitted FROM crier.events WHERE id = p_last_event_id[i] FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'digest %: its last event % does not exist', g.id, p_last_event_id[i]
                USING ERRCODE = 'foreign_key_violation';
        END IF;
        INSERT INTO crier.notifications AS n (key_hash, key, event_id, tenant, event_type, entity_id, recipient_id,
                                              discriminator, rules_version)
        VALUES (p_key_hash[i], p_key[i], p_last_event_id[i], g.tenant, g.event_type, g.digest_key, g.recipient_id,
                p_discriminator[i], p_rules_version)
        ON CONFLICT (key_hash) DO NOTHING
        RETURNING n.id INTO v_notification;
        IF v_notification IS NOT NULL THEN
            PERFORM crier.metric_add(ARRAY['crier_notifications_created_total'], ARRAY[''], ARRAY[''], ARRAY[''],
                                     ARRAY[''], ARRAY[1::double precision]);
            INSERT INTO crier.deliveries (notification_id, tenant, channel, message_id, target, body, secret,
                                          subject, html, sender, retry_schedule, emitted_at, state)
            VALUES (v_notification, g.tenant, g.channel, p_message_id[i], p_target[i], p_body[i], p_secret[i],
                    p_subject[i], p_html[i], p_sender[i], p_retry[i]::int[], v_emitted, 'pending');
            GET DIAGNOSTICS v_rows = ROW_COUNT;
            v_queued := v_queued + v_rows;
        ELSE
            SELECT id INTO v_notification FROM crier.notifications WHERE key_hash = p_key_hash[i];
        END IF;
        UPDATE crier.digests SET state = 'sent', sent_at = clock_timestamp(), notification_id = v_notification
        WHERE id = g.id;
        UPDATE crier.timers SET state = 'fired', fired_at = clock_timestamp(), attempts = attempts + 1,
            outcome = format('sent %s item(s) as notification %s', g.items, v_notification)
        WHERE id = p_timer_id[i];
    END LOOP;
    RETURN v_queued;
END
$$;
