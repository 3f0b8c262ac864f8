#!/usr/bin/env bash
# The log calls deliveries by the ids that crier status, crier dead list and
# the HTTP API show (crier.deliveries.id), not by the worker's in-flight
# tokens: a refused webhook and a failed one name their delivery's id; with
# CRIER_LOG_FORMAT=json every line is a JSON object carrying that id as a field.
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

# CRIER_LOG_FORMAT=json: one JSON object per line, the delivery's id as a field
for i in 4 5; do sql "SELECT crier.emit('acme', 'ping', 'p$i', '{}')" >/dev/null; done
env -u CRIER_ALLOW_TARGETS CRIER_LOG_FORMAT=json "$CRIER_BIN" serve --rules "$WORK/rules" \
    --set url=http://127.0.0.1:9/hooks --exit-when-idle >"$WORK/serve.jsonl" 2>&1 || fail "serve (json log) failed"
ids=$(sql "SELECT string_agg(id::text, ' ' ORDER BY id) FROM crier.deliveries WHERE id > $max")
/usr/bin/python3 - "$WORK/serve.jsonl" $ids <<'PY' || fail "JSON log lines: $(head -3 "$WORK/serve.jsonl")"
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
assert lines, "no log lines"
for l in lines:
    assert set(["time", "level", "pid", "module", "msg"]) <= set(l), l
    assert l["time"].endswith("Z") and l["level"] in ("debug", "info", "warn", "error"), l
refused = {l["delivery_id"] for l in lines if "refused" in l["msg"] and "delivery_id" in l}
want = {int(i) for i in sys.argv[2:]}
assert refused == want, (refused, want)
PY
echo ok
