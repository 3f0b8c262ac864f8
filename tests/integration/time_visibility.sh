#!/usr/bin/env bash
# The time decisions are visible (issue 11): `crier try` says each delivery's
# delay, throttle and digest in words; GET /v1/notifications/{id} on a real
# `crier serve --http` says why a delivery waits and until when (a delay, a
# digest window) and what became of it (throttled, cancelled, sent as part of
# a digest, with the digest's own notification and delivery state); `crier
# status` lists the pending timers, those fired in the last hour, a digest
# whose rendering keeps failing and the open digest windows. Time is moved on
# by making the timers due now in the database; the engine does the rest.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "invoice.due" { payload = {} }
crier.event_type "invoice.paid" { payload = {} }
crier.event_type "comment.created" { payload = { text = "string" } }
crier.event_type "build.failed" { payload = {} }
crier.event_type "alert.raised" { payload = {} }
crier.rule "invoice.due" {
    recipients = { "bob" }, channels = { "webhook", "feed" },
    webhook = { url = crier.setting("url"), delay = "10m", unless = "read", cancel_on = { "invoice.paid" } },
    feed = { title = "invoice due" },
}
crier.rule "invoice.paid" { recipients = { "bob" }, channels = { "feed" }, feed = { title = "paid" } }
crier.rule "comment.created" {
    recipients = { "alice" }, channels = { "webhook" },
    webhook = {
        url = crier.setting("url"),
        digest = { window = "1h", max_items = 50,
                   body = function(event) return { comments = event.digest.count } end },
    },
}
crier.rule "build.failed" {
    recipients = { "carol" }, channels = { "webhook" },
    webhook = { url = crier.setting("url"), throttle = { limit = 1, per = "1h" } },
}
-- a digest whose rendering always fails
crier.rule "alert.raised" {
    recipients = { "ops" }, channels = { "webhook" },
    webhook = {
        url = crier.setting("url"),
        digest = { window = "1h", body = function(event) error("no digest for " .. event.digest.key) end },
    },
}
LUA
KEY=$("$CRIER_BIN" keys create --tenant acme --name tests 2>"$WORK/keys.err") || fail "keys create: $(cat "$WORK/keys.err")"

# crier try: the timing of each delivery in words, and nothing stored.
try() { # TYPE ENTITY [PAYLOAD]: crier try's output
    local payload=${3:-'{}'} out
    out=$("$CRIER_BIN" try --rules "$WORK/rules" --set "url=$RECEIVER_URL" --tenant acme --type "$1" --entity "$2" \
        --payload "$payload" 2>&1) || fail "try $1: $out"
    echo "$out"
}
out=$(try invoice.due i1)
echo "$out" | grep -qxF "    timing: held 10 min, then dropped if the feed item was read or invoice.paid arrived for the \
same entity by then; otherwise sent" || fail "try says the delay and its conditions: $out"
out=$(try comment.created c1 '{"text": "hi"}')
echo "$out" | grep -qxF "    timing: joins digest comment.created for alice, a window of 1 h from its first item, at most 50 \
items (a full window is sent at once)" || fail "try says the digest: $out"
out=$(try build.failed b1)
grep -qxF "    timing: at most 1 per 1 h for throttle key build.failed (the excess is suppressed)" <<<"$out" ||
    fail "try says the throttle: $out"
out=$(try invoice.paid i1)
if grep -q "timing:" <<<"$out"; then fail "a delivery without time fields has no timing line: $out"; fi
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events")" "try stored nothing"

emit() { # TYPE ENTITY [PAYLOAD]
    local payload=${3:-'{}'}
    sql "SELECT crier.emit('acme', '$1', '$2', '$payload')" >/dev/null
}
emit invoice.due i1
for c in c1 c2 c3; do emit comment.created "$c" '{"text": "hi"}'; done
emit build.failed b1
emit build.failed b2
emit alert.raised a1
start_api serve --set "url=$RECEIVER_URL"
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state <> 'done'" 30 "the events are fanned out"
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'delivered'" 30 "the first build is sent"

# note TYPE ENTITY: the notification's id; get ID: GET /v1/notifications/ID into $WORK/body
note() {
    sql "SELECT id FROM crier.notifications WHERE event_type = '$1' AND entity_id = '$2' AND discriminator IS NULL"
}
get() {
    local code
    code=$(curl -sS --max-time 30 -o "$WORK/body" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
        "$API/v1/notifications/$1")
    assert_eq 200 "$code" "GET /v1/notifications/$1 ($(cat "$WORK/body"))"
}
# json EXPR: a Python expression over the last body (d; its first delivery: dl), printed
# as it is when a string, else as JSON.
json() {
    /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
dl = d["deliveries"][0] if d.get("deliveries") else None
v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v))' "$WORK/body" "$1"
}
# ts SQL: a timestamp as the API writes it (json_build_object's format)
ts() { sql "SELECT to_json(($1))#>>'{}'"; }

HELD=$(note invoice.due i1)
get "$HELD"
assert_eq held "$(json "dl['state']")" "the delayed delivery's state"
assert_eq delay "$(json "dl['held_because']")" "a held delivery is held because of its delay"
assert_eq "$(ts "SELECT due_at FROM crier.deliveries WHERE notification_id = $HELD")" "$(json "dl['held_until']")" \
    "held_until is the end of the delay"
assert_eq '{"seconds": 600, "unless": "read", "cancel_on": ["invoice.paid"]}' "$(json "dl['delay']")" \
    "the delay's conditions"
assert_eq null "$(json "dl['digest']")" "no digest for the delayed delivery"
assert_eq pending "$(json "d['status']")" "a held notification is pending"
/usr/bin/python3 -c '
import datetime, sys
until = datetime.datetime.fromisoformat(sys.argv[1])
left = (until - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
sys.exit(0 if 500 < left <= 600 else 1)' "$(json "dl['held_until']")" || fail "held_until is 10 min away: $(json "dl['held_until']")"

C1=$(note comment.created c1)
DIGEST=$(sql "SELECT digest_id FROM crier.deliveries WHERE notification_id = $C1")
[ -n "$DIGEST" ] || fail "comment c1 joined no digest: $(sql "SELECT state, last_error FROM crier.deliveries
    WHERE notification_id = $C1")"
get "$C1"
assert_eq digested "$(json "dl['state']")" "the comment's delivery state"
assert_eq digest "$(json "dl['held_because']")" "a digested delivery is held because of its digest"
assert_eq "$(ts "SELECT window_end FROM crier.digests WHERE id = $DIGEST")" "$(json "dl['held_until']")" \
    "held_until is the digest window's end"
assert_eq "[$DIGEST, \"comment.created\", \"open\", 3, 50, null]" \
    "$(json "[dl['digest'][k] for k in ('id', 'key', 'state', 'items', 'max_items', 'notification')]")" \
    "the digest joined: id, key, state, items, max_items, not sent"
assert_eq "$(ts "SELECT window_start FROM crier.digests WHERE id = $DIGEST")" "$(json "dl['digest']['window_start']")" \
    "the digest's window_start"
assert_eq pending "$(json "d['status']")" "a digested notification is pending while its digest waits"

B2=$(note build.failed b2)
get "$B2"
assert_eq suppressed "$(json "dl['state']")" "the second build is throttled"
json "dl['last_error']" | grep -q "^throttled: 1 webhook already sent to carol for throttle key build.failed" ||
    fail "the throttle's reason: $(json "dl['last_error']")"
assert_eq '{"limit": 1, "per_seconds": 3600, "key": "build.failed"}' "$(json "dl['throttle']")" "the throttle"
assert_eq "null null" "$(json "dl['held_because']") $(json "dl['held_until']")" "a throttled delivery is not held"
assert_eq suppressed "$(json "d['status']")" "a throttled notification"
get "$(note build.failed b1)"
assert_eq "delivered null" "$(json "dl['state']") $(json "dl['held_because']")" "the first build was sent at once"

# crier status: the pending timers, the open windows.
"$CRIER_BIN" status >"$WORK/status1" 2>&1 || fail "status: $(cat "$WORK/status1")"
grep -qE "^timers\.pending\.delay: 1 \(earliest due [0-9T:-]+Z, in [0-9]+ s\)$" "$WORK/status1" ||
    fail "status lists the delay's timer: $(cat "$WORK/status1")"
grep -qE "^timers\.pending\.digest: 2 \(earliest due [0-9T:-]+Z, in [0-9]+ s\)$" "$WORK/status1" ||
    fail "status lists the two digests' timers: $(cat "$WORK/status1")"
grep -qxF "timers.fired_last_hour: 0 (delay 0, digest 0)" "$WORK/status1" || fail "nothing fired yet: $(cat "$WORK/status1")"
grep -qxF "timers.render_failing: 0" "$WORK/status1" || fail "no rendering failed yet: $(cat "$WORK/status1")"
grep -qE "^digests\.open: 2 \(next to close: digest [0-9]+ of acme for (alice|ops) on webhook, key \
(comment.created|alert.raised), [13] items, at [0-9T:-]+Z, in [0-9]+ s\)$" "$WORK/status1" ||
    fail "status lists the open digest windows: $(cat "$WORK/status1")"

# An hour later: invoice i1 was paid meanwhile, the windows close.
emit invoice.paid i1
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state <> 'done'" 30 "the payment is fanned out"
sql "UPDATE crier.timers SET due_at = now() WHERE state = 'pending'; NOTIFY crier_timers" >/dev/null
wait_for "SELECT state = 'suppressed' FROM crier.deliveries WHERE notification_id = $HELD" 30 "the delay ends"
wait_for "SELECT d.state = 'delivered' FROM crier.digests g JOIN crier.deliveries d
          ON d.notification_id = g.notification_id WHERE g.id = $DIGEST" 30 "the comments' digest is sent"
wait_for "SELECT count(*) = 1 FROM crier.timers WHERE state = 'pending' AND outcome LIKE 'render failed:%'" 30 \
    "the alert's digest fails to render"

get "$HELD"
assert_eq "suppressed null null" "$(json "dl['state']") $(json "dl['held_because']") $(json "dl['held_until']")" \
    "a cancelled delivery is no longer held"
json "dl['last_error']" | grep -q "^cancelled: event [0-9]* (invoice.paid) arrived for i1 within the delay" ||
    fail "why it was cancelled: $(json "dl['last_error']")"
assert_eq delivered "$(json "d['status']")" "the webhook was cancelled; the feed item reached bob"

get "$C1"
DIGEST_NOTE=$(sql "SELECT notification_id FROM crier.digests WHERE id = $DIGEST")
assert_eq "digested digest null" \
    "$(json "dl['state']") $(json "dl['held_because']") $(json "dl['held_until']")" \
    "a digested delivery whose digest was sent is no longer waiting"
assert_eq "sent $DIGEST_NOTE delivered" \
    "$(json "dl['digest']['state']") $(json "dl['digest']['notification']['id']") $(json "dl['digest']['notification']['state']")" \
    "the digest's notification and its delivery's state"
assert_eq "$(sql "SELECT key FROM crier.notifications WHERE id = $DIGEST_NOTE")" \
    "$(json "dl['digest']['notification']['key']")" "the digest's notification key"
assert_eq delivered "$(json "d['status']")" "a comment sent in a delivered digest"
grep -qF '"body": "{\"comments\":3}"' "$RECEIVER_LOG" ||
    fail "the receiver got the digest of 3: $(cat "$RECEIVER_LOG")"

A1=$(note alert.raised a1)
get "$A1"
assert_eq "digested digest closed" \
    "$(json "dl['state']") $(json "dl['held_because']") $(json "dl['digest']['state']")" \
    "an item of a digest that cannot be rendered waits"
[ "$(json "dl['held_until']")" != null ] || fail "held_until is the digest's next try"

"$CRIER_BIN" status >"$WORK/status2" 2>&1 || fail "status: $(cat "$WORK/status2")"
grep -qxF "timers.pending.delay: 0" "$WORK/status2" || fail "no delay pending: $(cat "$WORK/status2")"
grep -qE "^timers\.pending\.digest: 1 \(earliest due " "$WORK/status2" ||
    fail "the failing digest's timer is pending: $(cat "$WORK/status2")"
grep -qxF "timers.fired_last_hour: 2 (delay 1, digest 1)" "$WORK/status2" ||
    fail "the delay and the comments' digest fired: $(cat "$WORK/status2")"
grep -qxF "timers.render_failing: 1" "$WORK/status2" || fail "one digest fails to render: $(cat "$WORK/status2")"
grep -qE "^timer [0-9]+ \(digest [0-9]+ of acme for ops on webhook, key alert\.raised\): [0-9]+ attempts, next at \
[0-9T:-]+Z: render failed: .*no digest for alert\.raised" "$WORK/status2" ||
    fail "status shows the failing digest with its error: $(cat "$WORK/status2")"
grep -qE "^digests\.closed: 1 " "$WORK/status2" ||
    fail "the failing digest's window is closed, waiting for its flush: $(cat "$WORK/status2")"
stop_serve
echo ok
