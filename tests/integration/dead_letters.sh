#!/usr/bin/env bash
# crier dead list / replay: dead deliveries and quarantined events are listed
# with filters; replay sends each again under the same webhook-id, and
# replaying twice (or replaying what succeeded) sends nothing twice.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver picky --statuses 400,400,400,204 --body 'nope'
RULES=(--rules "$CRIER_SOURCE_DIR/tests/support/rules" --set "ping_url=$RECEIVER_URL")

for i in 1 2 3; do ping "d$i"; done
sql "SELECT crier.emit('acme', 'ping', 'broken', '{\"n\": \"not a number\"}')" >/dev/null
"$CRIER_BIN" serve "${RULES[@]}" --exit-when-idle 2>"$WORK/serve1.log" || fail "serve: $(cat "$WORK/serve1.log")"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'dead'")" "three 400s are dead"

"$CRIER_BIN" dead list "${RULES[@]}" >"$WORK/list" 2>"$WORK/list.err" || fail "dead list failed"
assert_eq 3 "$(grep -c '^delivery ' "$WORK/list")" "dead deliveries listed"
assert_eq 1 "$(grep -c '^event ' "$WORK/list")" "quarantined event listed"
grep -q "error: HTTP 400" "$WORK/list" || fail "the last error is shown: $(cat "$WORK/list")"
grep -q "payload" "$WORK/list" || fail "the event's error names the payload problem: $(cat "$WORK/list")"
count() { "$CRIER_BIN" dead list "${RULES[@]}" --json "$@" 2>/dev/null | grep -c . || true; }
assert_eq 3 "$(count --channel webhook)" "--channel webhook"
assert_eq 0 "$(count --channel email)" "--channel email"
assert_eq 1 "$(count --events)" "--events"
assert_eq 0 "$(count --tenant globex)" "--tenant globex"
assert_eq 4 "$(count --type ping --since 1h)" "--type ping --since 1h"
assert_eq 0 "$(count --until 1h)" "--until 1h"
/usr/bin/python3 -c 'import json,sys; [json.loads(l) for l in sys.stdin]' \
    < <("$CRIER_BIN" dead list "${RULES[@]}" --json) || fail "--json lines are JSON"
if "$CRIER_BIN" dead list "${RULES[@]}" --since yesterdayish >/dev/null 2>"$WORK/bad.err"; then
    fail "a bad --since is refused"
fi
grep -q "duration ago" "$WORK/bad.err" || fail "the bad --since error says what to write: $(cat "$WORK/bad.err")"
if "$CRIER_BIN" dead frobnicate >/dev/null 2>&1; then fail "an unknown action is refused"; fi

# Dry run changes nothing.
"$CRIER_BIN" dead replay "${RULES[@]}" --dry-run | grep -q "would replay 3 deliveries and 1 events" ||
    fail "dry run count"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'dead'")" "dry run changed nothing"

# Replay one delivery by id, then everything on the webhook channel.
one=$(delivery_of d1 id)
"$CRIER_BIN" dead replay "${RULES[@]}" --id "$one" | grep -q "replayed 1 deliveries and 0 events" || fail "replay --id"
"$CRIER_BIN" dead replay "${RULES[@]}" --id "$one" | grep -q "nothing to replay" || fail "replaying twice is a no-op"
"$CRIER_BIN" serve "${RULES[@]}" --exit-when-idle 2>"$WORK/serve2.log" || fail "serve: $(cat "$WORK/serve2.log")"
assert_eq delivered "$(delivery_of d1 state)" "the replayed delivery"
"$CRIER_BIN" dead replay "${RULES[@]}" --channel webhook | grep -q "replayed 2 deliveries" || fail "replay --channel"
"$CRIER_BIN" dead replay "${RULES[@]}" --channel webhook | grep -q "nothing to replay" || fail "second replay"
"$CRIER_BIN" serve "${RULES[@]}" --exit-when-idle 2>"$WORK/serve3.log" || fail "serve: $(cat "$WORK/serve3.log")"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'")" "all replayed and delivered"
"$CRIER_BIN" dead replay "${RULES[@]}" --deliveries | grep -q "nothing to replay" ||
    fail "replaying what succeeded sends nothing"
assert_eq 6 "$(requests_at "$RECEIVER_LOG")" "3 refused + 3 replayed requests, no more"
assert_eq 3 "$(receiver_ids | sort -u | wc -l)" "the replays reuse the webhook-ids"
assert_eq 2 "$(sql "SELECT attempts FROM crier.deliveries WHERE id = $one")" "attempt numbers continue after a replay"

# A quarantined event is fanned out again (and, still invalid, dies again).
"$CRIER_BIN" dead replay "${RULES[@]}" --events | grep -q "replayed 0 deliveries and 1 events" || fail "replay --events"
assert_eq pending "$(sql "SELECT state FROM crier.events WHERE entity_id = 'broken'")" "the event is pending again"
echo "ok"
