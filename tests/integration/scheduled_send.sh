#!/usr/bin/env bash
# Scheduled sends through SQL: crier.emit with a "not before" time in the
# future stores the event as scheduled (the fan-out does not take it) with a
# send timer; at its time the event fans out, once, though two daemons run and
# one of them is killed -9 around the due time (a send it held is sent again
# under the same key when its lease ends). A time in the past is an
# ordinary emit; a re-emit of the dedupe key keeps the first time; a bad time
# is refused and changes nothing; crier status shows them; retention keeps
# them.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
ping_serve w1 "$RECEIVER_URL" --lease 2
W1=$SERVE_PID
ping_serve w2 "$RECEIVER_URL" --lease 2

due=$(sql "SELECT now() + interval '8 s'")
for i in 1 2 3; do
    sql "SELECT crier.emit('acme', 'ping', 's$i', '{}', NULL, '$due')" >/dev/null
done
past=$(sql "SELECT crier.emit('acme', 'ping', 'now1', '{}', NULL, now() - interval '1 hour')")
first=$(sql "SELECT id FROM crier.events WHERE entity_id = 's1'")
assert_eq "$first" "$(sql "SELECT crier.emit('acme', 'ping', 's1', '{}', NULL, now() + interval '1 hour')")" \
    "a re-emit returns the same event"
assert_eq "$first" "$(sql "SELECT crier.emit('acme', 'ping', 's1')")" "a re-emit without a time too"
assert_eq "scheduled scheduled scheduled" \
    "$(sql "SELECT string_agg(state, ' ' ORDER BY id) FROM crier.events WHERE entity_id LIKE 's%'")" \
    "future events wait as scheduled"
assert_eq t "$(sql "SELECT bool_and(not_before = '$due') FROM crier.events WHERE entity_id LIKE 's%'")" \
    "the first time stands"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.timers WHERE kind = 'send' AND state = 'pending' AND due_at = '$due'")" \
    "one send timer each"
wait_for "SELECT state = 'done' FROM crier.events WHERE id = $past" 10 "a past time is an ordinary emit"
"$CRIER_BIN" status >"$WORK/status.out"
grep -q "^events.scheduled: 3$" "$WORK/status.out" || fail "crier status counts the scheduled events: $(cat "$WORK/status.out")"
grep -q "^timers.pending.send: 3 (earliest due .*, in [0-9]* s)$" "$WORK/status.out" ||
    fail "crier status shows the scheduled sends' time: $(cat "$WORK/status.out")"
if out=$(sql "SELECT crier.emit('acme', 'ping', 'bad', '{}', NULL, 'infinity')" 2>&1); then
    fail "an infinite time was accepted"
fi
grep -q "not_before must be a finite time" <<<"$out" || fail "unclear error: $out"
if out=$(sql "SELECT crier.emit('acme', 'ping', 'bad', '{}', NULL, 'tomorrow at eight')" 2>&1); then
    fail "a malformed time was accepted"
fi
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'bad'")" "bad input changes nothing"

# retention keeps scheduled events (and their pending timers), whatever their age
sql "SELECT crier.retain('events', '0', 1000), crier.retain('timers', '0', 1000)" >/dev/null
assert_eq 3 "$(sql "SELECT count(*) FROM crier.events WHERE state = 'scheduled'")" "retention keeps scheduled events"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.timers WHERE kind = 'send' AND state = 'pending'")" \
    "retention keeps their timers"
# nothing before the time; w1 dies around the due time; w3 comes up
# (one statement: its snapshot and now() are taken together, so a slow psql
# start cannot make a fan-out at the due time look early)
while [ "$(sql "SELECT now() < '$due'::timestamptz - interval '100 ms'")" = t ]; do
    assert_eq 0 "$(sql "SELECT count(*) FROM crier.notifications
                        WHERE entity_id LIKE 's%' AND now() < '$due'::timestamptz")" "no fan-out before the time"
    sleep 0.05
done
kill -9 "$W1"
wait "$W1" 2>/dev/null || true
ping_serve w3 "$RECEIVER_URL" --lease 2
wait_for "SELECT count(*) = 3 FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id LIKE 's%' AND d.state = 'delivered'" 40 "scheduled events not delivered"
sleep 1
# w1 may die between a send and its result (the receiver saw its keep-alive
# connections reset): that delivery is sent again under the same key once its
# 2-s lease ends: at least once, never a second notification or key
receiver_ids >"$WORK/ids"
assert_eq 4 "$(sort -u "$WORK/ids" | wc -l)" "one key per notification"
sent=$(requests_at "$RECEIVER_LOG")
[ "$sent" -ge 4 ] || fail "each scheduled event sent: $sent requests"
assert_eq 4 "$(sql "SELECT count(*) FROM crier.notifications WHERE entity_id LIKE 's%' OR entity_id = 'now1'")" \
    "one notification each"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.notifications n JOIN crier.events e ON e.id = n.event_id
                    WHERE e.entity_id LIKE 's%' AND n.created_at < e.not_before")" "no fan-out before the time"
assert_eq "3 fired" "$(sql "SELECT count(*) || ' ' || string_agg(DISTINCT state, ',') FROM crier.timers WHERE kind = 'send'")" \
    "every send timer fired once"
late=$(sql "SELECT round(extract(epoch FROM max(n.created_at - e.not_before))::numeric, 2)
            FROM crier.notifications n JOIN crier.events e ON e.id = n.event_id WHERE e.entity_id LIKE 's%'")
note "scheduled events fanned out up to ${late}s after their time"
echo "ok"
