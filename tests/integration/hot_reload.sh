#!/usr/bin/env bash
# Hot reload under load: 50 new versions of the rules (every third one broken)
# are deployed during a 10,000-event run — by renaming a temporary file over
# the rule file (inotify) and by SIGHUP. A broken version is rejected and the
# running one kept; no event is lost and none is processed twice.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
RULES="$WORK/rules"
mkdir -p "$RULES"

write_version() { # N good|broken
    if [ "$2" = broken ]; then
        printf 'local crier = require "crier"\ncrier.event_type "ping" { payload = {} }\ncrier.rule "ping" {\n  recipients = { "ops" \n' \
            >"$RULES/.rules.lua.tmp"
    else
        cat >"$RULES/.rules.lua.tmp" <<LUA
local crier = require "crier"
crier.event_type "ping" { payload = {} }
crier.rule "ping" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = {
        url = crier.setting("url"),
        body = function(event) return { entity = event.entity_id, v = "v$1" } end,
    },
}
LUA
    fi
    mv "$RULES/.rules.lua.tmp" "$RULES/rules.lua"
}

write_version 0 good
"$CRIER_BIN" serve --rules "$RULES" --set "url=$RECEIVER_URL" --poll 0.5 >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
# (a change while the daemon loads its copies of the rules stops its start)
for _ in $(seq 300); do grep -q "engine: running" "$WORK/serve.log" && break; sleep 0.1; done
grep -q "engine: running" "$WORK/serve.log" || fail "crier serve did not start: $(cat "$WORK/serve.log")"

# Events arrive in 20 chunks of 500 while 50 versions are deployed.
broken=0
chunk=0
for v in $(seq 1 50); do
    if [ $((v % 2)) = 1 ] && [ "$chunk" -lt 20 ]; then
        chunk=$((chunk + 1))
        sql "SELECT count(crier.emit('acme', 'ping', 'e' || i)) FROM generate_series($(((chunk - 1) * 500 + 1)), $((chunk * 500))) AS i" >/dev/null &
    fi
    if [ $((v % 3)) = 0 ]; then
        write_version "$v" broken
        broken=$((broken + 1))
    else
        write_version "$v" good
    fi
    if [ $((v % 5)) = 0 ]; then kill -HUP "$SERVE_PID"; fi
    sleep 0.15
done
wait_emits() { while [ "$(jobs -pr | grep -vx "$SERVE_PID" | grep -c . || true)" -gt 2 ]; do sleep 0.1; done; }
wait_emits
write_version 51 good
wait_for "SELECT count(*) = 10000 FROM crier.events" 60 "every chunk emitted"
wait_for "SELECT count(*) = 10000 FROM crier.deliveries WHERE state = 'delivered'" 120 "every event delivered"
sleep 1 # let the last reload's status be written
"$CRIER_BIN" status >"$WORK/status" 2>&1 || fail "status: $(cat "$WORK/status")"
stop_serve

assert_eq "10000|1" "$(sql "SELECT count(*), max(attempts) FROM crier.events WHERE state = 'done'")" \
    "every event done, each processed once"
assert_eq 10000 "$(sql "SELECT count(*) FROM crier.notifications")" "notifications"
receiver_ids >"$WORK/ids"
assert_eq 10000 "$(wc -l <"$WORK/ids")" "requests at the receiver: one per notification, none repeated"
assert_eq 10000 "$(sort -u "$WORK/ids" | wc -l)" "distinct webhook-ids"
versions=$(sql "SELECT count(DISTINCT rules_version) FROM crier.notifications")
note "rules versions that produced notifications: $versions; broken versions deployed: $broken"
[ "$versions" -ge 3 ] || fail "reloads took effect during the run (only $versions versions used)"
rejected=$(grep -c "rejected, version" "$WORK/serve.log" || true)
[ "$rejected" -ge 1 ] || fail "broken versions were rejected and logged"
grep -q "rules.lua:[0-9]*:" "$WORK/serve.log" || fail "the rejection names file:line: $(grep -A2 rejected "$WORK/serve.log" | head)"
# Every notification was made by a version that loaded (never by a broken one):
# its body carries the version label of a good version.
/usr/bin/python3 - "$RECEIVER_LOG" <<'PY' || fail "bodies come from good versions only"
import json, sys
for line in open(sys.argv[1]):
    v = int(json.loads(json.loads(line)["body"])["v"][1:])
    assert v % 3 != 0 or v == 0, v
PY
grep -q "rules .* since" "$WORK/status" || fail "crier status shows the worker's rules: $(cat "$WORK/status")"
grep -q "reloads: [0-9]* ok, [1-9][0-9]* rejected" "$WORK/status" || fail "crier status counts rejected reloads: $(cat "$WORK/status")"
echo "ok"
