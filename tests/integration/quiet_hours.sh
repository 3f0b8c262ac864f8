#!/usr/bin/env bash
# Quiet hours with a real daemon (issue 15 item 2). The rule's quiet hours are written in
# local time and computed around "now" in America/Los_Angeles, so they hold ann (whose
# zone that is) and not bob (Asia/Tokyo, 16-17 hours away): ann's webhook is held by a
# durable timer until they end and then sent once; bob's goes at once; a required type and
# an urgent one pass through; the status API says "quiet_hours" and until when, and crier
# status counts the held delivery. Ignoring the zone (reading the periods as UTC) holds
# nobody, and the test fails.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
zone=America/Los_Angeles
# from two minutes ago to the next minute boundary at least 15 s away, in ann's local time
IFS="|" read -r from to <<<"$(sql "SELECT to_char(l - interval '2 min', 'HH24:MI'),
                                  to_char(date_trunc('minute', l + interval '15 s') + interval '1 min', 'HH24:MI')
                           FROM (SELECT now() AT TIME ZONE '$zone' AS l) x")"
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<LUA
local crier = require "crier"
crier.event_type "comment.created" { payload = { to = "string" } }
crier.event_type "security.alert" { required = true }
crier.event_type "build.broken" { urgent = true }
local people = {
    ann = { id = "ann", time_zone = "$zone" },
    bob = { id = "bob", time_zone = "Asia/Tokyo" },
}
crier.rule "comment.created" {
    recipients = function(event) return { people[event.payload.to] } end,
    channels = { "webhook" },
    quiet_hours = { from = "$from", to = "$to" },
    webhook = { url = crier.setting("url") },
}
for _, name in ipairs({ "security.alert", "build.broken" }) do
    crier.rule(name) {
        recipients = { people.ann },
        channels = { "webhook" },
        quiet_hours = { from = "$from", to = "$to" },
        webhook = { url = crier.setting("url") },
    }
end
LUA
"$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
sql "SELECT crier.emit('acme', 'comment.created', 'c1', '{\"to\": \"ann\"}'),
            crier.emit('acme', 'comment.created', 'c2', '{\"to\": \"bob\"}'),
            crier.emit('acme', 'security.alert', 's1'), crier.emit('acme', 'build.broken', 'b1')" >/dev/null
wait_for "SELECT count(*) = 3 FROM crier.deliveries WHERE state = 'delivered'" 30 "bob's and the urgent ones not sent"
held_until=$(sql "SELECT crier.quiet_hours_end(now(), '$zone', '[{\"from\": \"$from\", \"to\": \"$to\"}]')")
[ -n "$held_until" ] || fail "now is not inside $from-$to in $zone"
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'held'" 10 "ann's comment not held"
assert_eq "c1|true" "$(sql "SELECT n.entity_id || '|' || (d.due_at = '$held_until'::timestamptz)
                         FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                         WHERE d.state = 'held'")" "ann's comment is held until her quiet hours end"
status=$(sql "SELECT crier.api_notification('acme', n.id)::jsonb -> 'deliveries' -> 0
              FROM crier.notifications n WHERE n.entity_id = 'c1'")
assert_eq "quiet_hours|true|$zone" "$(sql "SELECT (j->>'held_because') || '|' || ((j->>'held_until')::timestamptz = '$held_until'::timestamptz)
                                         || '|' || (j->'quiet_hours'->>'zone') FROM (SELECT '$status'::jsonb AS j) x")" \
    "the status API says why and until when"
"$CRIER_BIN" status >"$WORK/status" 2>&1 || fail "crier status: $(cat "$WORK/status")"
grep -q "^timers.quiet_hours: 1 deliveries, 0 digests held" "$WORK/status" || fail "crier status: $(cat "$WORK/status")"
assert_eq 3 "$(requests_at "$RECEIVER_LOG")" "nothing more sent in the quiet hours"

wait_for "SELECT count(*) = 4 FROM crier.deliveries WHERE state = 'delivered'" 90 "ann's comment not sent when they ended"
assert_eq t "$(sql "SELECT min(a.started_at) >= '$held_until'::timestamptz FROM crier.delivery_attempts a
                    JOIN crier.deliveries d ON d.id = a.delivery_id JOIN crier.notifications n ON n.id = d.notification_id
                    WHERE n.entity_id = 'c1'")" "sent after the quiet hours ended"
assert_eq 4 "$(requests_at "$RECEIVER_LOG")" "four requests"
receiver_ids >"$WORK/ids"
assert_eq 4 "$(sort -u "$WORK/ids" | wc -l)" "each sent once"
assert_eq "fired|pending" "$(sql "SELECT state || '|' || outcome FROM crier.timers WHERE delivery_id IS NOT NULL")" \
    "one timer, fired once, released the delivery"
echo "ok"
