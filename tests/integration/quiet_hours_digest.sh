#!/usr/bin/env bash
# A digest whose window ends inside its recipient's quiet hours (issue 15 item 2) is sent
# when they end, once. The quiet hours (from a person's stored setting, in their stored
# zone, America/Los_Angeles) are computed around "now"; ann's items join a 4-second window
# at once, its timer comes due inside the quiet hours and is postponed to their end (crier
# status and the status API show it), and then one digest carrying every item is sent,
# one request. bob (no quiet hours) gets his digest when his window ends.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
zone=America/Los_Angeles
IFS="|" read -r from to <<<"$(sql "SELECT to_char(l - interval '2 min', 'HH24:MI'),
                                          to_char(date_trunc('minute', l + interval '20 s') + interval '1 min', 'HH24:MI')
                                   FROM (SELECT now() AT TIME ZONE '$zone' AS l) x")"
quiet="[{\"from\": \"$from\", \"to\": \"$to\"}]"
sql "SELECT crier.set_recipient_settings('acme', 'ann', '{\"time_zone\": \"$zone\", \"quiet_hours\": $quiet}')" >/dev/null
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "comment.created" { payload = { to = "string" } }
crier.rule "comment.created" {
    recipients = function(event) return { event.payload.to } end,
    channels = { "webhook" },
    webhook = {
        url = crier.setting("url"),
        digest = {
            window = "4s",
            body = function(event)
                return { to = event.digest.items[1].payload.to, count = event.digest.count }
            end,
        },
    },
}
LUA
"$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
for i in 1 2 3; do sql "SELECT crier.emit('acme', 'comment.created', 'a$i', '{\"to\": \"ann\"}')" >/dev/null; done
sql "SELECT crier.emit('acme', 'comment.created', 'b1', '{\"to\": \"bob\"}')" >/dev/null
held_until=$(sql "SELECT crier.quiet_hours_end(now(), '$zone', '$quiet')")
[ -n "$held_until" ] || fail "now is not inside $from-$to in $zone"
wait_for "SELECT count(*) = 4 FROM crier.deliveries WHERE state = 'digested'" 20 "the items did not join digests"
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'delivered'" 20 "bob's digest not sent"
wait_for "SELECT count(*) = 1 FROM crier.timers WHERE kind = 'digest' AND state = 'pending' AND outcome = 'quiet hours'" 20 \
    "ann's digest not postponed by her quiet hours"
assert_eq "3|true|true" "$(sql "SELECT g.items || '|' || (t.due_at = '$held_until'::timestamptz) || '|' || (g.window_end < t.due_at)
                               FROM crier.digests g JOIN crier.timers t ON t.digest_id = g.id
                               WHERE g.recipient_id = 'ann'")" "one window of 3 items, due when the quiet hours end"
assert_eq "digest|true" "$(sql "SELECT (j->>'held_because') || '|' || ((j->>'held_until')::timestamptz = '$held_until'::timestamptz)
                                FROM (SELECT crier.api_notification('acme', n.id)::jsonb -> 'deliveries' -> 0 AS j
                                      FROM crier.notifications n WHERE n.entity_id = 'a1') x")" \
    "the status API: held by the digest until the quiet hours end"
"$CRIER_BIN" status >"$WORK/status" 2>&1 || fail "crier status: $(cat "$WORK/status")"
grep -q "^timers.quiet_hours: 0 deliveries, 1 digests held" "$WORK/status" || fail "crier status: $(cat "$WORK/status")"
assert_eq 1 "$(requests_at "$RECEIVER_LOG")" "only bob's digest during ann's quiet hours"

wait_for "SELECT count(*) = 2 FROM crier.deliveries WHERE state = 'delivered'" 90 "ann's digest not sent when they ended"
assert_eq t "$(sql "SELECT min(a.started_at) >= '$held_until'::timestamptz FROM crier.delivery_attempts a
                    JOIN crier.deliveries d ON d.id = a.delivery_id JOIN crier.notifications n ON n.id = d.notification_id
                    WHERE n.recipient_id = 'ann' AND n.discriminator LIKE 'digest:%'")" "sent after the quiet hours"
sleep 1
assert_eq 2 "$(requests_at "$RECEIVER_LOG")" "two requests: one digest each"
grep -qF '\"count\":3' "$RECEIVER_LOG" || fail "ann's digest carries her 3 items: $(cat "$RECEIVER_LOG")"
assert_eq "1|fired" "$(sql "SELECT count(*) || '|' || min(t.state) FROM crier.digests g JOIN crier.timers t ON t.digest_id = g.id
                           WHERE g.recipient_id = 'ann' AND g.state = 'sent'")" "one digest, its timer fired once"
echo "ok"
