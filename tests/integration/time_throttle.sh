#!/usr/bin/env bash
# Throttle: at most 3 webhooks per minute per recipient. 500 events for one
# recipient, emitted within a second, planned by two workers at once in small
# batches: exactly 3 are sent and 497 suppressed with the reason; another
# recipient and another throttle key count apart; a throttle with a digest
# folds the excess into the digest instead (2 sent, 8 in one digest).
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
crier.event_type "deploy.failed" { payload = { n = "integer" } }
crier.rule "deploy.failed" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = {
        url = crier.setting("url"),
        throttle = { limit = 2, per = "1h" },
        digest = { window = "2s", body = function(event)
            local ns = {}
            for i, item in ipairs(event.digest.items) do ns[i] = item.payload.n end
            return { folded = ns }
        end },
    },
}
LUA
sql "SELECT count(crier.emit('acme', 'deploy.failed', 'd' || i, jsonb_build_object('n', i)))
     FROM generate_series(1, 10) AS i" >/dev/null
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
# the digest of the folded deploy alerts is due 2 s after its first item
"$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" >"$WORK/serve3.log" 2>&1 &
PIDS+=($!)
wait_for "SELECT count(*) = 1 FROM crier.digests WHERE state = 'sent'" 30 "the deploy digest was not sent"
wait_for "SELECT count(*) = 0 FROM crier.deliveries WHERE state IN ('pending', 'sending')" 30 "not delivered"
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
assert_eq 2 "$(count "e.event_type = 'deploy.failed' AND d.state = 'delivered' AND n.discriminator IS NULL")" "deploys sent within the throttle"
assert_eq 8 "$(count "e.event_type = 'deploy.failed' AND d.state = 'digested'")" "deploys folded into the digest"
folded=$(grep 'folded' "$RECEIVER_LOG" | /usr/bin/python3 -c '
import json, sys
print(sorted(n for line in sys.stdin for n in json.loads(json.loads(line)["body"])["folded"]))')
sent=$(sql "SELECT string_agg(e.payload->>'n', ', ' ORDER BY (e.payload->>'n')::int) FROM crier.deliveries d
            JOIN crier.notifications n ON n.id = d.notification_id JOIN crier.events e ON e.id = n.event_id
            WHERE e.event_type = 'deploy.failed' AND d.state = 'digested'")
assert_eq "[$sent]" "$folded" "the digest holds exactly the throttled deploys"
assert_eq 12 "$(requests_at "$RECEIVER_LOG")" "requests at the receiver (9 builds, 2 deploys, 1 digest)"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'timing'")" "no delivery left undecided"
echo "ok"
