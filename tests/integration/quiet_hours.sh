#!/usr/bin/env bash
# Quiet hours with a real daemon (issue 15 item 2). The rule's quiet hours are written in
# local time and computed around "now" in America/Los_Angeles, so they hold ann (whose
# zone that is) and not bob (Asia/Tokyo, 16-17 hours away): ann's webhook is held by a
# durable timer until they end and then sent once; bob's goes at once; a required type and
# an urgent one pass through; the status API says "quiet_hours" and until when, and crier
# status counts the held delivery. Stored settings (crier.recipient_settings) win over the
# rules: carol's stored zone puts her in the quiet hours (and her webhook renders in her
# zone and locale), dave's stored [] takes the rule's quiet hours away. Ignoring the zone
# (reading the periods as UTC) holds nobody, and the test fails.
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
    carol = { id = "carol", time_zone = "Asia/Tokyo" },
    dave = { id = "dave", time_zone = "$zone" },
}
crier.rule "comment.created" {
    recipients = function(event) return { people[event.payload.to] } end,
    channels = { "webhook" },
    quiet_hours = { from = "$from", to = "$to" },
    webhook = { url = crier.setting("url"), body = '{"to": "{{ recipient.id }}", "zone": "{{ 0 | date(\'%Z\') }}", '
        .. '"locale": "{{ recipient.locale | default(\'-\') }}"}' },
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
sql "SELECT crier.set_recipient_settings('acme', 'carol', '{\"time_zone\": \"$zone\", \"locale\": \"de-AT\"}'),
            crier.set_recipient_settings('acme', 'dave', '{\"quiet_hours\": []}'),
            crier.set_recipient_settings('acme', 'zed', '{\"time_zone\": \"UTC\"}')" >/dev/null
"$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
sql "SELECT crier.emit('acme', 'comment.created', 'c1', '{\"to\": \"ann\"}'),
            crier.emit('acme', 'comment.created', 'c2', '{\"to\": \"bob\"}'),
            crier.emit('acme', 'comment.created', 'c3', '{\"to\": \"carol\"}'),
            crier.emit('acme', 'comment.created', 'c4', '{\"to\": \"dave\"}'),
            crier.emit('acme', 'security.alert', 's1'), crier.emit('acme', 'build.broken', 'b1')" >/dev/null
wait_for "SELECT count(*) = 4 FROM crier.deliveries WHERE state = 'delivered'" 30 \
    "bob's, dave's and the urgent ones not sent"
held_until=$(sql "SELECT crier.quiet_hours_end(now(), '$zone', '[{\"from\": \"$from\", \"to\": \"$to\"}]')")
[ -n "$held_until" ] || fail "now is not inside $from-$to in $zone"
wait_for "SELECT count(*) = 2 FROM crier.deliveries WHERE state = 'held'" 10 "ann's and carol's comments not held"
assert_eq "c1|true c3|true" "$(sql "SELECT string_agg(n.entity_id || '|' || (d.due_at = '$held_until'::timestamptz), ' '
                                            ORDER BY n.entity_id)
                                    FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                                    WHERE d.state = 'held'")" "ann's and carol's comments are held until the quiet hours end"
status=$(sql "SELECT crier.api_notification('acme', n.id)::jsonb -> 'deliveries' -> 0
              FROM crier.notifications n WHERE n.entity_id = 'c1'")
assert_eq "quiet_hours|true|$zone" "$(sql "SELECT (j->>'held_because') || '|' || ((j->>'held_until')::timestamptz = '$held_until'::timestamptz)
                                         || '|' || (j->'quiet_hours'->>'zone') FROM (SELECT '$status'::jsonb AS j) x")" \
    "the status API says why and until when"
"$CRIER_BIN" status >"$WORK/status" 2>&1 || fail "crier status: $(cat "$WORK/status")"
grep -q "^timers.quiet_hours: 2 deliveries, 0 digests held" "$WORK/status" || fail "crier status: $(cat "$WORK/status")"
assert_eq 4 "$(requests_at "$RECEIVER_LOG")" "nothing more sent in the quiet hours"

wait_for "SELECT count(*) = 6 FROM crier.deliveries WHERE state = 'delivered'" 90 "the held comments not sent when they ended"
assert_eq t "$(sql "SELECT min(a.started_at) >= '$held_until'::timestamptz FROM crier.delivery_attempts a
                    JOIN crier.deliveries d ON d.id = a.delivery_id JOIN crier.notifications n ON n.id = d.notification_id
                    WHERE n.entity_id IN ('c1', 'c3')")" "sent after the quiet hours ended"
assert_eq 6 "$(requests_at "$RECEIVER_LOG")" "six requests"
receiver_ids >"$WORK/ids"
assert_eq 6 "$(sort -u "$WORK/ids" | wc -l)" "each sent once"
assert_eq "fired|pending fired|pending" "$(sql "SELECT string_agg(state || '|' || outcome, ' ') FROM crier.timers
                                                WHERE delivery_id IS NOT NULL")" \
    "one timer each, fired once, released the delivery"
grep -qF '"body": "{\"to\": \"carol\", \"zone\": \"PST\", \"locale\": \"de-AT\"}"' "$RECEIVER_LOG" ||
    fail "carol's webhook renders in her stored zone and locale: $(grep carol "$RECEIVER_LOG")"
grep -qF '"body": "{\"to\": \"bob\", \"zone\": \"JST\", \"locale\": \"-\"}"' "$RECEIVER_LOG" ||
    fail "bob's webhook renders in the rules' zone: $(grep bob "$RECEIVER_LOG")"
echo "ok"
