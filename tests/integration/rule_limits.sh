#!/usr/bin/env bash
# A rule that loops forever fails only its own event: it is retried, then
# quarantined with the limit error (visible in crier dead list), while normal
# traffic beside it keeps flowing with low latency. So does a rule whose
# pattern would backtrack for hours on its payload (refused before it runs),
# and a payload of 40,000 spaces through the trim filter is delivered at once.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.limits { instructions = 5000000 }
crier.event_type "ping" { payload = {} }
crier.event_type "spin" { payload = {} }
crier.rule "ping" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = { url = crier.setting("url") },
}
crier.rule "spin" {
    recipients = function(event)
        local n = 0
        while true do n = n + 1 end
    end,
    channels = { "webhook" },
    webhook = { url = crier.setting("url") },
}
crier.event_type "padded" { payload = { s = "string" } }
crier.rule "padded" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = { url = crier.setting("url"), body = '{"trimmed": "{{ payload.s | trim | length }}"}' },
}
crier.event_type "backtrack" { payload = { s = "string" } }
crier.rule "backtrack" {
    recipients = function(event)
        return string.find(event.payload.s, ".-.-.-.-x") and { "ops" } or {}
    end,
    channels = { "webhook" },
    webhook = { url = crier.setting("url") },
}
LUA
"$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" --event-attempts 2 --batch-size 20 \
    >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")

# 300 pings over about 3 seconds, with a looping event every 30 pings.
for round in $(seq 10); do
    sql "SELECT count(crier.emit('acme', 'ping', 'p$round-' || i)) FROM generate_series(1, 30) AS i" >/dev/null
    sql "SELECT crier.emit('acme', 'spin', 's$round')" >/dev/null
    if [ "$round" -le 2 ]; then
        sql "SELECT crier.emit('acme', 'padded', 'pad$round', jsonb_build_object('s', ' a' || repeat(' ', 40000) || 'b '));
             SELECT crier.emit('acme', 'backtrack', 'bt$round', jsonb_build_object('s', repeat('a', 30000)))" >/dev/null
    fi
    sleep 0.3
done
wait_for "SELECT count(*) = 302 FROM crier.deliveries WHERE state = 'delivered'" 60 "normal traffic delivered"
wait_for "SELECT count(*) = 10 FROM crier.events WHERE event_type = 'spin' AND state = 'dead'" 60 \
    "looping events quarantined"
wait_for "SELECT count(*) = 2 FROM crier.events WHERE event_type = 'backtrack' AND state = 'dead'" 60 \
    "backtracking patterns quarantined"
stop_serve

p99=$(sql "SELECT round(1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY d.delivered_at - e.created_at)))
           FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
           JOIN crier.events e ON e.id = n.event_id")
note "normal traffic beside looping rules: p99 event-to-delivered ${p99} ms"
[ "$p99" -lt 2000 ] || fail "normal traffic's p99 latency ${p99} ms beside looping rules (limit 2000 ms)"
assert_eq 2 "$(sql "SELECT max(attempts) FROM crier.events WHERE event_type = 'spin'")" "a looping event is retried once"
"$CRIER_BIN" dead list --events --type spin >"$WORK/dead" 2>/dev/null || fail "dead list"
assert_eq 10 "$(grep -c '^event ' "$WORK/dead")" "quarantined events listed"
grep -q "instruction limit" "$WORK/dead" || fail "the limit error is shown: $(head -5 "$WORK/dead")"
grep -q "rules.lua:13" "$WORK/dead" || fail "the traceback names the rule's line: $(head -5 "$WORK/dead")"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.notifications n JOIN crier.events e ON e.id = n.event_id
                    WHERE e.event_type IN ('spin', 'backtrack')")" "a failed event creates nothing"
"$CRIER_BIN" dead list --events --type backtrack >"$WORK/dead_bt" 2>/dev/null || fail "dead list"
grep -q "pattern too complex for a rule: string.find" "$WORK/dead_bt" ||
    fail "the pattern error is shown: $(head -5 "$WORK/dead_bt")"
assert_eq 2 "$(grep -c 'trimmed\\": \\"40002' "$RECEIVER_LOG")" "the padded payloads trimmed and delivered"
echo "ok"
