#!/usr/bin/env bash
# Endpoints that keep failing: paused after a run of failures (their deliveries
# wait without spending attempts), probed, resumed on success; disabled after
# failing too long, with a crier.endpoint.disabled event that a rule routes.
. "$(dirname "$0")/../support/lib.sh"
new_db

# Three failures pause the endpoint; the probe succeeds and resumes it.
start_receiver flaky --statuses 500,500,500,204
FLAKY_LOG=$RECEIVER_LOG
ping_serve s1 "$RECEIVER_URL" --pause-after 3 --probe-interval 2s
for i in 1 2 3; do ping "a$i"; done
# (the pause may be short on a busy machine: wait for its cause, the third
# failure, not for the paused state itself)
for _ in $(seq 200); do [ "$(requests_at "$FLAKY_LOG")" -ge 3 ] && break; sleep 0.1; done
for i in 4 5 6 7 8; do ping "a$i"; done
wait_for "SELECT count(*) = 8 FROM crier.deliveries WHERE state = 'delivered'" 30 "the probe resumes the endpoint"
stop_serve
assert_eq active "$(sql "SELECT state FROM crier.endpoints")" "endpoint state after the probe"
assert_eq 0 "$(sql "SELECT consecutive_failures FROM crier.endpoints")" "failures reset by the success"
grep -q "endpoint paused" "$WORK/s1.log" || fail "the pause is logged"
grep -q "endpoint resumed" "$WORK/s1.log" || fail "the resume is logged"
# Pings emitted while the endpoint was paused were sent once, after it resumed.
assert_eq "1 1 1 1 1" "$(echo $(for i in 4 5 6 7 8; do delivery_of "a$i" attempts; done))" \
    "attempts of the deliveries that waited"
assert_eq 11 "$(requests_at "$FLAKY_LOG")" "requests: 3 failures, the probe, 7 more"

# Always 503: paused, probed, then disabled; its deliveries die, and the
# crier.endpoint.disabled event reaches the ops webhook through a rule.
start_receiver ops
OPS_URL=$RECEIVER_URL
OPS_LOG=$RECEIVER_LOG
start_receiver down --statuses 503
DOWN_URL=$RECEIVER_URL
ping_serve s2 "$DOWN_URL" --pause-after 2 --probe-interval 0.3s --disable-after 2s --set "ops_url=$OPS_URL"
ping d1
ping d2
wait_for "SELECT count(*) = 1 FROM crier.endpoints WHERE state = 'disabled' AND target = '$DOWN_URL'" 30 \
    "an endpoint failing too long is disabled"
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'delivered' AND target = '$OPS_URL'" 20 \
    "the disabled event is delivered to ops"
stop_serve
assert_eq "dead dead" "$(echo $(delivery_of d1 state) $(delivery_of d2 state))" "deliveries of a disabled endpoint"
case "$(delivery_of d2 last_error)" in *disabled*) ;; *) fail "last error says disabled: $(delivery_of d2 last_error)" ;; esac
assert_eq 1 "$(sql "SELECT count(*) FROM crier.events WHERE event_type = 'crier.endpoint.disabled' AND state = 'done'")" \
    "one crier.endpoint.disabled event"
grep -q "crier.endpoint.disabled" "$OPS_LOG" || fail "ops got the event: $(cat "$OPS_LOG")"
grep -q "$DOWN_URL" "$OPS_LOG" || fail "the event names the endpoint"
grep -q "disabled after failing too long" "$WORK/s2.log" || fail "the disable is logged"
echo "ok"
