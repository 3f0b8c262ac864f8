#!/usr/bin/env bash
# Delay with conditions: an email-like webhook 6 s after an in-app item,
# sent only if the item is still unread. Items read within the delay (one by
# one, or by mark-all-read) produce nothing, the others exactly one request;
# an invoice.paid cancels the pending invoice.overdue reminder of the same
# invoice only. The timers survive kill -9: a worker down at the due time
# fires them once when it comes back (late, never twice).
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "comment.created" { payload = { to = "string" } }
crier.event_type "invoice.overdue" { payload = {} }
crier.event_type "invoice.paid" { payload = {} }
crier.rule "comment.created" {
    recipients = function(event) return { event.payload.to } end,
    channels = { "feed", "webhook" },
    feed = { title = "New comment" },
    webhook = { url = crier.setting("url"), delay = "6s", unless = "read" },
}
crier.rule "invoice.overdue" {
    recipients = { "billing" },
    channels = { "webhook" },
    webhook = { url = crier.setting("url"), delay = "6s", cancel_on = { "invoice.paid" } },
}
LUA
serve() { # NAME
    "$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" >"$WORK/$1.log" 2>&1 &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
}

serve w1
for i in $(seq 1 10); do sql "SELECT crier.emit('acme', 'comment.created', 'c$i', '{\"to\": \"ann\"}')" >/dev/null; done
for i in $(seq 1 4); do sql "SELECT crier.emit('acme', 'comment.created', 'm$i', '{\"to\": \"bob\"}')" >/dev/null; done
sql "SELECT crier.emit('acme', 'invoice.overdue', 'inv_1'), crier.emit('acme', 'invoice.overdue', 'inv_2')" >/dev/null
wait_for "SELECT count(*) = 16 FROM crier.deliveries WHERE state = 'held'" 20 "deliveries not held"
assert_eq 16 "$(sql "SELECT count(*) FROM crier.timers WHERE kind = 'delay'")" "one timer each"
assert_eq 0 "$(requests_at "$RECEIVER_LOG")" "nothing sent during the delay"
# ann reads c1..c5 one by one, bob marks all read; inv_1 is paid
for i in $(seq 1 5); do
    sql "SELECT crier.feed_mark('acme', 'ann', i.id, 'read', true) FROM crier.feed_items i
         JOIN crier.notifications n ON n.id = i.notification_id WHERE n.entity_id = 'c$i'" >/dev/null
done
sql "SELECT crier.feed_mark_all('acme', 'bob', 'read')" >/dev/null
sql "SELECT crier.emit('acme', 'invoice.paid', 'inv_1')" >/dev/null
held_until=$(sql "SELECT max(due_at) FROM crier.deliveries WHERE state = 'held'")
# the worker is killed before the delays end and comes back after them
kill -9 "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
while [ "$(sql "SELECT now() > '$held_until'::timestamptz + interval '1 s'")" != t ]; do sleep 0.2; done
serve w2
serve w3
wait_for "SELECT count(*) = 0 FROM crier.timers WHERE state = 'pending'" 30 "timers did not fire"
wait_for "SELECT count(*) = 0 FROM crier.deliveries WHERE state IN ('pending', 'sending', 'held')" 30 \
    "deliveries not finished"

entity_state() { sql "SELECT string_agg(n.entity_id || '=' || d.state, ' ' ORDER BY n.entity_id)
                      FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                      WHERE d.channel = 'webhook' AND $1"; }
assert_eq "c1=suppressed c10=delivered c2=suppressed c3=suppressed c4=suppressed c5=suppressed c6=delivered c7=delivered c8=delivered c9=delivered" \
    "$(entity_state "n.recipient_id = 'ann'")" "ann: read items cancelled, unread ones sent"
assert_eq "m1=suppressed m2=suppressed m3=suppressed m4=suppressed" "$(entity_state "n.recipient_id = 'bob'")" \
    "bob: mark-all-read cancels every item it covers"
assert_eq "inv_1=suppressed inv_2=delivered" "$(entity_state "n.event_type = 'invoice.overdue'")" \
    "invoice.paid cancels its invoice's reminder only"
assert_eq 'cancelled: the feed item was read within the delay (unless = "read")' \
    "$(sql "SELECT DISTINCT d.last_error FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
            WHERE n.recipient_id = 'ann' AND d.state = 'suppressed'")" "the reason for a read item"
sql "SELECT d.last_error FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
     WHERE n.entity_id = 'inv_1'" | grep -q "^cancelled: event [0-9]* (invoice.paid) arrived for inv_1" ||
    fail "the reason for a cancelled reminder names the event"
assert_eq 6 "$(requests_at "$RECEIVER_LOG")" "requests: the unread comments and inv_2's reminder"
receiver_ids >"$WORK/ids"
assert_eq 6 "$(sort -u "$WORK/ids" | wc -l)" "each sent once"
assert_eq 16 "$(sql "SELECT count(*) FROM crier.timers WHERE state = 'fired'")" "every timer fired once"
late=$(sql "SELECT round(extract(epoch FROM max(fired_at - due_at))::numeric, 1) FROM crier.timers")
note "timers fired up to ${late}s late (the worker was down at the due time)"
echo "ok"
