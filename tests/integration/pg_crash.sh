#!/usr/bin/env bash
# PostgreSQL itself crashes mid fan-out (kill -9 of the postmaster and every
# backend, shared memory and unwritten WAL lost), twice, under a running
# crier serve that reconnects: no event is lost, no notification exists
# twice, every event is done with exactly its notifications and deliveries,
# and every notification reaches the receiver under one webhook-id. Fan-out
# batches written by COPY commit without waiting for the WAL flush
# (src/engine/fanout.c, SQL_IDS): a crash may take such a batch away whole,
# done marks included, and the events are fanned out again, a delivery sent
# from it before the crash again under the same webhook-id.
. "$(dirname "$0")/../support/lib.sh"
start_receiver hooks
EVENTS=${PG_CRASH_EVENTS:-12000}

PGDIR="$WORK/pg"
"$CRIER_BIN" cluster start "$PGDIR" >/dev/null || fail "the private cluster did not start"
trap 'cleanup; "$CRIER_BIN" cluster stop "$PGDIR" >/dev/null 2>&1 || true' EXIT
export CRIER_DATABASE_URL
CRIER_DATABASE_URL=$("$CRIER_BIN" cluster url "$PGDIR")
"$CRIER_BIN" migrate >/dev/null || fail "migrate failed"

mkdir -p "$WORK/rules"
cat >"$WORK/rules/crash.lua" <<LUA
local crier = require "crier"
crier.event_type "doc.shared" { description = "a document was shared", payload = { n = "integer" } }
crier.rule "doc.shared" {
    recipients = function(event)
        return { "ann", "bob", "cy" }
    end,
    channels = { "webhook" },
    webhook = { url = "$RECEIVER_URL" },
}
LUA
sql "SELECT count(crier.emit('acme', 'doc.shared', 'doc_' || i, jsonb_build_object('n', i)))
     FROM generate_series(1, $EVENTS) AS i" >/dev/null

crash_postgres() { # kill -9 of the postmaster and all its children
    local pm
    pm=$(head -1 "$PGDIR/postmaster.pid")
    pkill -9 -P "$pm" 2>/dev/null || true
    kill -9 "$pm" || fail "no postmaster to kill"
    for _ in $(seq 100); do kill -0 "$pm" 2>/dev/null || break; sleep 0.05; done
}

"$CRIER_BIN" serve --rules "$WORK/rules" --batch-size 500 --poll 0.2 >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
for round in 1 2; do
    wait_for "SELECT count(*) >= $((round * EVENTS / 4)) FROM crier.events WHERE state = 'done'" 120 \
        "round $round: no progress before the crash"
    crash_postgres
    note "round $round: PostgreSQL killed; restarting it (crash recovery)"
    "$CRIER_BIN" cluster start "$PGDIR" >/dev/null || fail "the cluster did not come back after the crash"
done
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state <> 'done'" 300 "events left behind after the crashes"
wait_for "SELECT count(*) = 0 FROM crier.deliveries WHERE state <> 'delivered'" 300 \
    "deliveries left behind after the crashes"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "crier serve exited with an error: $(tail -5 "$WORK/serve.log")"

assert_eq "$EVENTS" "$(sql "SELECT count(*) FROM crier.events")" "events (none lost, none added)"
assert_eq $((EVENTS * 3)) "$(sql "SELECT count(*) FROM crier.notifications")" "notifications (3 per event)"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events e
                    WHERE (SELECT count(*) FROM crier.notifications n WHERE n.event_id = e.id) <> 3")" \
    "events without exactly their 3 notifications"
assert_eq $((EVENTS * 3)) "$(sql "SELECT count(*) FROM crier.deliveries d JOIN crier.notifications n
                                  ON n.id = d.notification_id")" "one delivery per notification"
receiver_ids >"$WORK/ids"
assert_eq $((EVENTS * 3)) "$(sort -u "$WORK/ids" | wc -l)" "distinct webhook-ids at the receiver"
copied=$(sed -n 's/.*(\([0-9]*\) by COPY).*/\1/p' "$WORK/serve.log" | tail -1)
[ "${copied:-0}" -gt 0 ] || fail "no batch went by COPY: the crash never met the path under test"
note "notifications by COPY in the serve's count: $copied; requests at the receiver: $(wc -l <"$WORK/ids")"
echo "ok"
