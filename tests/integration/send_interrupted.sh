#!/usr/bin/env bash
# Sends interrupted: SIGTERM with sends in flight releases them at the
# shutdown deadline (due again at once, no attempt of the schedule spent), and
# kill -9 during a burst of 5,000 sends loses nothing — after a restart every
# notification is delivered and the receiver sees exactly one distinct
# webhook-id per notification.
. "$(dirname "$0")/../support/lib.sh"
new_db

# SIGTERM: three sends hang at the receiver; the deadline releases them.
start_receiver slow --delays-ms 5000,5000,5000,0
ping_serve term "$RECEIVER_URL" --shutdown-deadline 1s
for i in 1 2 3; do ping "t$i"; done
for _ in $(seq 100); do [ "$(requests_at "$RECEIVER_LOG")" -ge 3 ] && break; sleep 0.1; done
assert_eq 3 "$(requests_at "$RECEIVER_LOG")" "three sends in flight"
# being sent: stored as pending under a lease (sql/023), shown as 'sending'
assert_eq "3|3" "$(sql "SELECT count(*) FILTER (WHERE state = 'pending' AND lease_until > now()),
                              count(*) FILTER (WHERE crier.delivery_state(state, lease_until) = 'sending')
                       FROM crier.deliveries")" "the sends in flight are leased"
"$CRIER_BIN" status >"$WORK/status.out"
grep -q "^deliveries.sending: 3$" "$WORK/status.out" || fail "crier status shows the sends in flight: $(cat "$WORK/status.out")"
assert_eq 3 "$(sql "SELECT value FROM crier.api_metrics() WHERE metric = 'crier_deliveries' AND value1 = 'sending'")" \
    "the crier_deliveries{state=\"sending\"} gauge"
assert_eq 0 "$(sql "SELECT delivery_lag FROM crier.api_health()")" "a send in flight is not a waiting delivery"
started=$(date +%s%N)
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "serve exited with an error after SIGTERM: $(cat "$WORK/term.log")"
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
[ "$elapsed_ms" -lt 4000 ] || fail "shutdown took ${elapsed_ms} ms with a 1s deadline"
assert_eq "3|0|3" "$(sql "SELECT count(*) FILTER (WHERE state = 'pending' AND due_at <= now()),
                                count(*) FILTER (WHERE state = 'pending' AND lease_until IS NOT NULL), sum(budget_start)
                         FROM crier.deliveries")" "released: pending and due now, schedule not spent"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.delivery_attempts WHERE outcome = 'released'")" "released attempts recorded"
grep -q "releasing them" "$WORK/term.log" || fail "the release is logged"
ping_serve term2 "$RECEIVER_URL"
wait_for "SELECT count(*) = 3 FROM crier.deliveries WHERE state = 'delivered'" 20 "released sends delivered after restart"
stop_serve
assert_eq 3 "$(receiver_ids | sort -u | wc -l)" "distinct webhook-ids after the release"

# kill -9 in the middle of a burst of 5,000 sends.
start_receiver burst
sql "SELECT count(crier.emit('acme', 'ping', 'b' || i)) FROM generate_series(1, 5000) AS i" >/dev/null
ping_serve victim "$RECEIVER_URL" --lease 2
for _ in $(seq 600); do [ "$(requests_at "$RECEIVER_LOG")" -ge 1500 ] && break; sleep 0.1; done
kill -9 "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
at_kill=$(requests_at "$RECEIVER_LOG")
[ "$at_kill" -lt 5000 ] || fail "the burst finished before the kill ($at_kill requests)"
note "killed after $at_kill requests; $(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'pending' AND lease_until IS NOT NULL") leased"
ping_serve survivor "$RECEIVER_URL" --lease 2
wait_for "SELECT count(*) = 5000 FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id LIKE 'b%' AND d.state = 'delivered'" 120 "every notification delivered after the kill"
stop_serve
receiver_ids >"$WORK/ids"
assert_eq 5000 "$(sort -u "$WORK/ids" | wc -l)" "distinct webhook-ids at the receiver, one per notification"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state <> 'delivered'")" "nothing left undelivered"
note "requests at the receiver: $(wc -l <"$WORK/ids") for 5000 notifications"
echo "ok"
