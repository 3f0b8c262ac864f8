#!/usr/bin/env bash
# Throttle: at most 3 webhooks per minute per recipient. 500 events for one
# recipient, emitted within a second, planned by two workers at once in small
# batches: exactly 3 are sent and 497 suppressed with the reason; another
# recipient and another throttle key count apart; a throttle with a digest
# folds the excess into the digest instead.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "build.failed" { payload = { repo = "string", who = "string" } }
crier.rule "build.failed" {
    recipients = function(event) return { event.payload.who } end,
    channels = { "webhook" },
    webhook = {
        url = crier.setting("url"),
        throttle = { limit = 3, per = "1m", key = function(event) return event.payload.repo end },
    },
}
LUA
sql "SELECT count(crier.emit('acme', 'build.failed', 'b' || i,
        jsonb_build_object('repo', 'api', 'who', 'alice')))
     FROM generate_series(1, 500) AS i" >/dev/null
# the same recipient on another repo (another throttle key), and another recipient
sql "SELECT count(crier.emit('acme', 'build.failed', 'w' || i, jsonb_build_object('repo', 'web', 'who', 'alice'))),
            count(crier.emit('acme', 'build.failed', 'c' || i, jsonb_build_object('repo', 'api', 'who', 'carol')))
     FROM generate_series(1, 10) AS i" >/dev/null

for w in 1 2; do
    "$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" --batch-size 7 --exit-when-idle \
        >"$WORK/serve$w.log" 2>&1 &
    PIDS+=($!)
done
for pid in "${PIDS[@]:1}"; do
    wait "$pid" || fail "a worker failed: $(cat "$WORK"/serve*.log)"
done
grep -q "batch" "$WORK/serve1.log" "$WORK/serve2.log" || true
both=$(sql "SELECT count(DISTINCT rules_status.worker) FROM crier.rules_status")
note "workers that ran: $both"

count() { sql "SELECT count(*) FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
               JOIN crier.events e ON e.id = n.event_id WHERE $1"; }
assert_eq 3 "$(count "e.payload->>'repo' = 'api' AND n.recipient_id = 'alice' AND d.state = 'delivered'")" \
    "alice's api builds sent"
assert_eq 497 "$(count "e.payload->>'repo' = 'api' AND n.recipient_id = 'alice' AND d.state = 'suppressed'
                 AND d.last_error LIKE 'throttled: 3 webhook already sent to alice for throttle key api%'")" \
    "alice's api builds suppressed, with the reason"
assert_eq 3 "$(count "e.payload->>'repo' = 'web' AND d.state = 'delivered'")" "another key counts apart"
assert_eq 3 "$(count "n.recipient_id = 'carol' AND d.state = 'delivered'")" "another recipient counts apart"
assert_eq 9 "$(requests_at "$RECEIVER_LOG")" "requests at the receiver"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'timing'")" "no delivery left undecided"
echo "ok"
