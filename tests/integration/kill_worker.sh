#!/usr/bin/env bash
# kill -9 of a worker mid-batch, then a restart: no event is lost, no
# notification is duplicated, and every notification reaches the receiver
# (a redelivery after the crash carries the same webhook-id).
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks --delay-ms 2
EVENTS=${KILL_EVENTS:-5000}

sql "SELECT count(crier.emit('acme', 'invoice.created', 'inv_' || i,
        jsonb_build_object('invoice_id', 'inv_' || i, 'amount_cents', i, 'currency', 'EUR')))
     FROM generate_series(1, $EVENTS) AS i" >/dev/null

for round in 1 2 3; do
    start_serve "victim$round" --batch-size 100 --lease 2
    victim=$SERVE_PID
    # Let it get part of the way, then kill it without warning.
    wait_for "SELECT count(*) >= $((round * EVENTS / 5)) FROM crier.events WHERE state = 'done'" 120 \
        "round $round made no progress"
    kill -9 "$victim"
    wait "$victim" 2>/dev/null || true
    note "round $round: killed with $(sql "SELECT count(*) FROM crier.events WHERE state = 'pending'") events pending," \
        "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'pending' AND lease_until IS NOT NULL") deliveries leased"
done
sql "SELECT count(*) FROM crier.events WHERE state = 'pending'" | grep -qv '^0$' ||
    note "all events were done before the last kill (deliveries were still in flight)"

start_serve survivor --lease 2
survivor=$SERVE_PID
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state = 'pending'" 300 "events lost after the kill"
wait_for "SELECT count(*) = 0 FROM crier.deliveries WHERE state IN ('pending', 'sending')" 300 \
    "deliveries stuck after the kill"
kill -TERM "$survivor"
wait "$survivor" || fail "the restarted worker exited with an error"

assert_eq "$EVENTS" "$(sql "SELECT count(*) FROM crier.events WHERE state = 'done'")" "every event processed"
assert_eq $((EVENTS * 3)) "$(sql "SELECT count(*) FROM crier.notifications")" "notifications (3 admins each)"
assert_eq $((EVENTS * 3)) "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'")" "delivered"
receiver_ids >"$WORK/ids"
assert_eq $((EVENTS * 3)) "$(sort -u "$WORK/ids" | wc -l)" "distinct webhook-ids at the receiver"
note "requests at the receiver: $(wc -l <"$WORK/ids") (redeliveries after kills share their webhook-id)"
echo "ok"
