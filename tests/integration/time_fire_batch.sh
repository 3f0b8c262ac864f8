#!/usr/bin/env bash
# crier.fire_timers decides a batch of delays at once: every rule of a delay's
# end, in one batch and again in batches of 4 — plain delays released; unless
# "read" / "seen" against explicit marks, a mark-all-read watermark and items
# read or not; cancel_on by an event after (not before, not another
# tenant's); the condition first, then throttle (in the timers' due order),
# throttle with digest, digest; a delivery no longer held, one gone, one named
# by two timers; a timer not yet due. Each outcome and reason word for word,
# every timer fired once, and a second firing changes nothing.
. "$(dirname "$0")/../support/lib.sh"
new_db

cat >"$WORK/setup.sql" <<'SQL'
SET client_min_messages = warning;
CREATE FUNCTION pg_temp.held(p_entity text, p_recipient text, p_timing jsonb, p_due interval DEFAULT '-1 second',
                             p_type text DEFAULT 'comment.created', p_feed boolean DEFAULT false)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_event bigint; v_n bigint; v_d bigint; v_due timestamptz := clock_timestamp() + p_due;
BEGIN
    INSERT INTO crier.events (tenant, event_type, entity_id, payload, dedupe_key, state)
    VALUES ('acme', p_type, p_entity, '{}', p_type || ':' || p_entity || ':' || p_recipient, 'done') RETURNING id INTO v_event;
    INSERT INTO crier.notifications (key_hash, key, tenant, event_id, event_type, entity_id, recipient_id)
    VALUES (md5(p_entity || ':' || p_recipient)::uuid, p_entity || ':' || p_recipient, 'acme', v_event, p_type, p_entity,
            p_recipient) RETURNING id INTO v_n;
    IF p_feed THEN
        INSERT INTO crier.feed_items (tenant, recipient_id, notification_id, event_type, content)
        VALUES ('acme', p_recipient, v_n, p_type, '{}');
    END IF;
    INSERT INTO crier.deliveries (notification_id, tenant, channel, message_id, target, body, state, due_at, timing)
    VALUES (v_n, 'acme', 'webhook', 'msg_' || v_n, 'http://127.0.0.1:9/x', '{}', 'held', v_due, p_timing)
    RETURNING id INTO v_d;
    INSERT INTO crier.timers (key, tenant, kind, due_at, delivery_id)
    VALUES (crier.timer_key(ARRAY['delay', v_d::text]), 'acme', 'delay', v_due, v_d);
    RETURN v_d;
END $$;
CREATE FUNCTION pg_temp.item(p_entity text) RETURNS bigint LANGUAGE sql AS $$
    SELECT i.id FROM crier.feed_items i JOIN crier.notifications n ON n.id = i.notification_id WHERE n.entity_id = p_entity $$;

SELECT pg_temp.held('p1', 'ann', '{"delay": 3}', '-10 s');
SELECT pg_temp.held('r_read', 'ann', '{"delay": 3, "unless": "read"}', p_feed => true);
SELECT pg_temp.held('r_unread', 'ann', '{"delay": 3, "unless": "read"}', p_feed => true);
SELECT pg_temp.held('r_nofeed', 'ann', '{"delay": 3, "unless": "read"}');
SELECT pg_temp.held('s_seen', 'ann', '{"delay": 3, "unless": "seen"}', p_feed => true);
SELECT pg_temp.held('s_read', 'ann', '{"delay": 3, "unless": "seen"}', p_feed => true);
SELECT pg_temp.held('s_unseen', 'ann', '{"delay": 3, "unless": "seen"}', p_feed => true);
SELECT pg_temp.held('w_all', 'bob', '{"delay": 3, "unless": "read"}', p_feed => true);
SELECT crier.feed_mark('acme', 'ann', pg_temp.item('r_read'), 'read', true);
SELECT crier.feed_mark('acme', 'ann', pg_temp.item('s_seen'), 'seen', true);
SELECT crier.feed_mark('acme', 'ann', pg_temp.item('s_read'), 'read', true);
SELECT crier.feed_mark_all('acme', 'bob', 'read');
SELECT pg_temp.held('w_after', 'bob', '{"delay": 3, "unless": "read"}', p_feed => true);
INSERT INTO crier.events (tenant, event_type, entity_id, dedupe_key, state) VALUES ('acme', 'invoice.paid', 'inv_2', 'paid2', 'done');
SELECT pg_temp.held('inv_1', 'billing', '{"delay": 3, "cancel_on": ["invoice.paid", "invoice.void"]}', p_type => 'invoice.overdue');
SELECT pg_temp.held('inv_2', 'billing', '{"delay": 3, "cancel_on": ["invoice.paid"]}', p_type => 'invoice.overdue');
SELECT pg_temp.held('inv_3', 'billing', '{"delay": 3, "cancel_on": ["invoice.paid"]}', p_type => 'invoice.overdue');
INSERT INTO crier.events (tenant, event_type, entity_id, dedupe_key, state) VALUES ('acme', 'invoice.paid', 'inv_1', 'paid1', 'done');
INSERT INTO crier.events (tenant, event_type, entity_id, dedupe_key, state) VALUES ('acme', 'invoice.void', 'inv_1', 'void1', 'done');
INSERT INTO crier.events (tenant, event_type, entity_id, dedupe_key, state) VALUES ('other', 'invoice.paid', 'inv_3', 'paid3', 'done');
SELECT pg_temp.held('rc', 'ann', '{"delay": 3, "unless": "read", "cancel_on": ["comment.deleted"]}', p_feed => true);
INSERT INTO crier.events (tenant, event_type, entity_id, dedupe_key, state) VALUES ('acme', 'comment.deleted', 'rc', 'del_rc', 'done');
SELECT crier.feed_mark('acme', 'ann', pg_temp.item('rc'), 'read', true);
SELECT pg_temp.held('t' || i, 'carol', '{"delay": 3, "throttle": {"limit": 1, "per": 60, "key": "k"}}', make_interval(secs => -5 + i))
FROM generate_series(1, 3) i;
SELECT pg_temp.held('td' || i, 'carol', '{"delay": 3, "throttle": {"limit": 1, "per": 60, "key": "j"},
                     "digest": {"key": "j", "window": 3600, "recipient": {"id": "carol"}}}', make_interval(secs => -5 + i))
FROM generate_series(1, 2) i;
SELECT pg_temp.held('g' || i, 'dan', '{"delay": 3, "digest": {"key": "d", "window": 3600, "recipient": {"id": "dan"}}}')
FROM generate_series(1, 2) i;
SELECT pg_temp.held('gr', 'dan', '{"delay": 3, "unless": "read", "digest": {"key": "d", "window": 3600}}', p_feed => true);
SELECT crier.feed_mark('acme', 'dan', pg_temp.item('gr'), 'read', true);
SELECT pg_temp.held('np', 'ann', '{"delay": 3}');
UPDATE crier.deliveries SET state = 'pending' FROM crier.notifications n WHERE n.id = notification_id AND n.entity_id = 'np';
INSERT INTO crier.timers (key, tenant, kind, due_at, delivery_id) VALUES (crier.timer_key(ARRAY['delay', 'gone']), 'acme', 'delay', now() - interval '1 s', 999999);
INSERT INTO crier.timers (key, tenant, kind, due_at, delivery_id)
SELECT crier.timer_key(ARRAY['delay', 'dup']), 'acme', 'delay', now() - interval '0.5 s', d.id
FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id = 'p1';
SELECT pg_temp.held('future', 'ann', '{"delay": 3600}', '1 hour');
SQL

result() {
    sql "SELECT coalesce(n.entity_id, '(' || t.kind || ' ' || coalesce(t.delivery_id::text, '-') || ')') || ' | timer ' || t.state || ' ' || t.attempts || ' '
                || coalesce(regexp_replace(t.outcome, 'event [0-9]+', 'event N'), '-')
                || ' | delivery ' || coalesce(d.state, '-') || ' '
                || coalesce(regexp_replace(d.last_error, 'event [0-9]+', 'event N'), '-')
                || CASE WHEN d.digest_id IS NOT NULL THEN ' digest' ELSE '' END
                || CASE WHEN d.state = 'pending' AND d.due_at > now() - interval '1 minute' THEN ' due' ELSE '' END
         FROM crier.timers t LEFT JOIN crier.deliveries d ON d.id = t.delivery_id
         LEFT JOIN crier.notifications n ON n.id = d.notification_id ORDER BY t.id"
    sql "SELECT 'digests ' || count(*) || ' items ' || sum(items) FROM crier.digests"
    sql "SELECT 'throttle hits ' || count(*) FROM crier.throttle_hits"
}
snapshot() {
    sql "SELECT md5(string_agg(t::text, ',' ORDER BY t.id)) FROM crier.timers t"
    sql "SELECT md5(string_agg(d::text, ',' ORDER BY d.id)) FROM crier.deliveries d"
    sql "SELECT md5(string_agg(g::text, ',' ORDER BY g.id)) FROM crier.digests g"
}
setup() {
    sql "SET client_min_messages = warning; TRUNCATE crier.timers, crier.throttle_hits, crier.digests, crier.events, crier.notifications, crier.deliveries,
         crier.feed_items, crier.feed_states, crier.feed_watermarks RESTART IDENTITY CASCADE" >/dev/null
    psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 -f "$WORK/setup.sql" >/dev/null
}

cat >"$WORK/expected" <<'OUT'
p1 | timer fired 1 pending | delivery pending - due
r_read | timer fired 1 cancelled: the feed item was read within the delay (unless = "read") | delivery suppressed cancelled: the feed item was read within the delay (unless = "read")
r_unread | timer fired 1 pending | delivery pending - due
r_nofeed | timer fired 1 pending | delivery pending - due
s_seen | timer fired 1 cancelled: the feed item was seen within the delay (unless = "seen") | delivery suppressed cancelled: the feed item was seen within the delay (unless = "seen")
s_read | timer fired 1 cancelled: the feed item was seen within the delay (unless = "seen") | delivery suppressed cancelled: the feed item was seen within the delay (unless = "seen")
s_unseen | timer fired 1 pending | delivery pending - due
w_all | timer fired 1 cancelled: the feed item was read within the delay (unless = "read") | delivery suppressed cancelled: the feed item was read within the delay (unless = "read")
w_after | timer fired 1 pending | delivery pending - due
inv_1 | timer fired 1 cancelled: event N (invoice.paid) arrived for inv_1 within the delay (cancel_on) | delivery suppressed cancelled: event N (invoice.paid) arrived for inv_1 within the delay (cancel_on)
inv_2 | timer fired 1 pending | delivery pending - due
inv_3 | timer fired 1 pending | delivery pending - due
rc | timer fired 1 cancelled: the feed item was read within the delay (unless = "read") | delivery suppressed cancelled: the feed item was read within the delay (unless = "read")
t1 | timer fired 1 pending | delivery pending - due
t2 | timer fired 1 throttled | delivery suppressed throttled: 1 webhook already sent to carol for throttle key k in the last 60 s (throttle = { limit = 1, per = 60 s })
t3 | timer fired 1 throttled | delivery suppressed throttled: 1 webhook already sent to carol for throttle key k in the last 60 s (throttle = { limit = 1, per = 60 s })
td1 | timer fired 1 pending | delivery pending - due
td2 | timer fired 1 digested | delivery digested - digest
g1 | timer fired 1 digested | delivery digested - digest
g2 | timer fired 1 digested | delivery digested - digest
gr | timer fired 1 cancelled: the feed item was read within the delay (unless = "read") | delivery suppressed cancelled: the feed item was read within the delay (unless = "read")
np | timer fired 1 nothing to do: the delivery is pending | delivery pending - due
(delay 999999) | timer fired 1 nothing to do: the delivery is gone | delivery - -
p1 | timer fired 1 nothing to do: the delivery is pending | delivery pending - due
future | timer pending 0 - | delivery held -
(digest -) | timer pending 0 - | delivery - -
(digest -) | timer pending 0 - | delivery - -
digests 2 items 3
throttle hits 2
OUT

# One batch.
setup
assert_eq "24 delay" "$(sql "SELECT count(*) || ' ' || string_agg(DISTINCT kind, ',') FROM crier.fire_timers(500)")" \
    "every due timer fired in place"
result >"$WORK/one"
diff -u "$WORK/expected" "$WORK/one" || fail "one batch: outcomes differ from the rules (diff above)"
before=$(snapshot)
assert_eq 0 "$(sql "SELECT count(*) FROM crier.fire_timers(500)")" "a second firing finds nothing"
assert_eq "$before" "$(snapshot)" "a second firing changes nothing"

# Batches of 4: the same outcomes (the throttle counts in the timers' due order).
setup
batches=0
while [ "$(sql "SELECT count(*) FROM crier.fire_timers(4)")" != 0 ]; do
    batches=$((batches + 1))
    [ "$batches" -lt 20 ] || fail "batches of 4 do not end"
done
assert_eq 6 "$batches" "batches of 4"
result >"$WORK/four"
diff -u "$WORK/expected" "$WORK/four" || fail "batches of 4: outcomes differ (diff above)"
echo "ok"
