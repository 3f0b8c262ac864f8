#!/usr/bin/env bash
# Worker heartbeats: two crier serve workers beat every second (--heartbeat
# 1s, dead after 3 missed); crier status and /metrics list both alive with
# what they have in flight. kill -9 of one: within 3 beats (plus a beat of
# slack) crier status says DEAD and /metrics counts it in
# crier_workers{state="dead"}, while its per-worker series disappear; the
# other stays alive. A SIGTERM'd worker is "stopped", not dead.
. "$(dirname "$0")/../support/lib.sh"
new_db
note_rules
start_api api --heartbeat 1s
api_pid=$SERVE_PID
"$CRIER_BIN" serve --rules "$WORK/rules" --poll 0.2 --heartbeat 1s >"$WORK/victim.log" 2>&1 &
victim=$!
PIDS+=("$victim")
host=$(hostname)

wait_for "SELECT count(*) = 2 FROM crier.rules_status
          WHERE crier.worker_state(heartbeat_at, heartbeat_interval, stopped_at) = 'alive'" 20 "two workers alive"
"$CRIER_BIN" status >"$WORK/status1" || fail "crier status failed"
grep -q "^workers: 2 alive, 0 dead" "$WORK/status1" || fail "status counts two live workers: $(cat "$WORK/status1")"
grep -q "^worker $host:$victim: alive (heartbeat [0-9]*s ago, every 1s): [0-9]* events and [0-9]* deliveries in flight" \
    "$WORK/status1" || fail "status shows the victim alive with its work: $(cat "$WORK/status1")"
curl -s "$API/metrics" >"$WORK/metrics1"
grep -q "^crier_workers{state=\"alive\"} 2$" "$WORK/metrics1" || fail "metrics: two alive: $(grep workers "$WORK/metrics1")"
grep -q "^crier_worker_heartbeat_age_seconds{worker=\"$host:$victim\"}" "$WORK/metrics1" ||
    fail "the victim has its series: $(grep worker "$WORK/metrics1")"

note "kill -9 the victim"
beat_before=$(sql "SELECT heartbeat_at FROM crier.rules_status WHERE worker = '$host:$victim'")
kill -9 "$victim"
t0=$(date +%s%N)
dead=""
for _ in $(seq 80); do
    if "$CRIER_BIN" status 2>/dev/null | grep -q "^worker $host:$victim: DEAD (no heartbeat for [0-9]*s; dead after 3s)"; then
        dead=1
        break
    fi
    sleep 0.1
done
took=$(( ($(date +%s%N) - t0) / 1000000 ))
[ -n "$dead" ] || fail "crier status did not show the killed worker dead: $("$CRIER_BIN" status)"
note "crier status says DEAD after $took ms (last beat $beat_before)"
[ "$took" -le 4500 ] || fail "dead after $took ms: the stated interval is 3 beats of 1 s"
[ "$took" -ge 1000 ] || fail "dead after $took ms: too soon for 3 missed beats of 1 s"
curl -s "$API/metrics" >"$WORK/metrics2"
grep -q "^crier_workers{state=\"dead\"} 1$" "$WORK/metrics2" || fail "metrics: one dead: $(grep workers "$WORK/metrics2")"
grep -q "^crier_workers{state=\"alive\"} 1$" "$WORK/metrics2" || fail "metrics: one alive: $(grep workers "$WORK/metrics2")"
if grep -q "worker=\"$host:$victim\"" "$WORK/metrics2"; then
    fail "the dead worker's series are still there: $(grep "$victim" "$WORK/metrics2")"
fi
grep -q "^crier_rules_info{worker=\"$host:$api_pid\"" "$WORK/metrics2" || fail "the live worker keeps its series"
"$CRIER_BIN" status | grep -q "^worker $host:$api_pid: alive" || fail "the other worker is still alive"

note "a clean stop is not a death"
stop_serve
state=$(sql "SELECT crier.worker_state(heartbeat_at, heartbeat_interval, stopped_at) FROM crier.rules_status
             WHERE worker = '$host:$api_pid'")
assert_eq stopped "$state" "a SIGTERM'd worker"
"$CRIER_BIN" status | grep -q "^workers: 0 alive, 1 dead, 1 stopped" || fail "status after the stop: $("$CRIER_BIN" status)"
echo "ok"
