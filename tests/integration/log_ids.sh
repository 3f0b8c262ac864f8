#!/usr/bin/env bash
# The log calls deliveries by the ids that crier status, crier dead list and
# the HTTP API show (crier.deliveries.id), not by the worker's in-flight
# tokens: a refused webhook and a failed one name their delivery's id.
. "$(dirname "$0")/../support/lib.sh"
new_db
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "ping" { payload = {} }
crier.rule "ping" {
    recipients = { "ann", "bob", "cy" },
    channels = { "webhook" },
    webhook = { url = crier.setting("url") },
}
LUA
for i in 1 2 3; do sql "SELECT crier.emit('acme', 'ping', 'p$i', '{}')" >/dev/null; done
# loopback is refused unless allowed: every delivery dies with a log line
env -u CRIER_ALLOW_TARGETS CRIER_LOG=debug "$CRIER_BIN" serve --rules "$WORK/rules" --set url=http://127.0.0.1:9/hooks \
    --exit-when-idle >"$WORK/serve.log" 2>&1 || fail "serve: $(tail -3 "$WORK/serve.log")"
ids=$(sql "SELECT string_agg(id::text, ' ' ORDER BY id) FROM crier.deliveries WHERE state = 'dead'")
assert_eq "9" "$(echo "$ids" | wc -w)" "nine deliveries died"
for id in $ids; do
    grep -q "delivery $id refused: 127.0.0.1 is a loopback address" "$WORK/serve.log" ||
        fail "the log names delivery $id: $(grep -m3 refused "$WORK/serve.log")"
done
max=$(sql "SELECT max(id) FROM crier.deliveries")
if grep -oE "delivery [0-9]+" "$WORK/serve.log" | awk -v max="$max" '{ if ($2 + 0 > max) bad = 1 } END { exit !bad }'; then
    fail "the log names a delivery that does not exist: $(grep -oE "delivery [0-9]+" "$WORK/serve.log" | sort -u | tail -3)"
fi
echo ok
