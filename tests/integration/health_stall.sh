#!/usr/bin/env bash
# /healthz and /readyz of an API-only process (crier serve --no-workers)
# judge the whole system: 503 no_live_worker while no worker has a heartbeat;
# 200 once one runs; when that worker is paused with SIGSTOP while events pile
# up, 503 outbox_lag with the reason; 200 again after SIGCONT; a delivery
# waiting past the limit gives 503 delivery_lag.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "ping" { payload = {} }
crier.rule "ping" { recipients = { "ops" }, channels = { "webhook" }, webhook = { url = crier.setting("url") } }
LUA
start_api api --no-workers --healthz-max-lag 2s --set "url=$RECEIVER_URL"
get() { curl -s -o "$WORK/body" -w '%{http_code}' --max-time 10 "$API$1"; }
code() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("error", {}).get("code", d["status"]))' "$WORK/body"; }
expect() { # PATH STATUS CODE WHAT
    assert_eq "$2" "$(get "$1")" "$4: $1 status ($(cat "$WORK/body"))"
    assert_eq "$3" "$(code)" "$4: $1 reason"
}
# wait_health STATUS CODE TIMEOUT WHAT
wait_health() {
    local i
    for i in $(seq $(($3 * 10))); do
        if [ "$(get /healthz)" = "$1" ] && [ "$(code)" = "$2" ]; then return 0; fi
        sleep 0.1
    done
    fail "$4: /healthz is $(cat "$WORK/body") after $3 s"
}

expect /healthz 503 no_live_worker "an API-only process, no worker"
expect /readyz 503 no_live_worker "an API-only process, no worker"
grep -q "no crier serve worker has a live heartbeat" "$WORK/body" || fail "the reason says what to do: $(cat "$WORK/body")"

"$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" --heartbeat 1s --poll 0.2 >"$WORK/worker.log" 2>&1 &
WORKER=$!
PIDS+=("$WORKER")
wait_health 200 ok 20 "a worker started"
expect /readyz 200 ok "a worker started"

kill -STOP "$WORKER"
sql "SELECT count(crier.emit('acme', 'ping', 'p' || i)) FROM generate_series(1, 50) AS i" >/dev/null
wait_health 503 outbox_lag 10 "the only worker is paused while events pile up"
expect /readyz 503 outbox_lag "the only worker is paused"
grep -q "the oldest due event has waited" "$WORK/body" || fail "outbox_lag reason: $(cat "$WORK/body")"
kill -CONT "$WORKER"
wait_for "SELECT count(*) = 50 FROM crier.deliveries WHERE state = 'delivered'" 30 "the worker did not catch up"
wait_health 200 ok 10 "the worker caught up"

kill -STOP "$WORKER"
sql "UPDATE crier.deliveries SET state = 'pending', due_at = now() - interval '10 minutes'
     WHERE id = (SELECT min(id) FROM crier.deliveries)" >/dev/null
expect /healthz 503 delivery_lag "a delivery waits past the limit"
grep -q "the oldest due delivery has waited" "$WORK/body" || fail "delivery_lag reason: $(cat "$WORK/body")"
kill -CONT "$WORKER"
wait_health 200 ok 20 "the delivery was made"
echo "ok"
