#!/usr/bin/env bash
# The outbox's wake-ups (src/engine/wake.h): an idle daemon sleeps and an emit
# wakes it within a bound, and no event is left behind across sleep/wake
# transitions while 8 sessions emit concurrently, many of them in transactions
# that stay open while the daemon goes to sleep. The fallback poll is 30 s, so
# an event that waited for it would break the bounds below.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
IDLE_BOUND_MS=${WAKE_IDLE_BOUND_MS:-250}
LATE_BOUND_MS=${WAKE_LATE_BOUND_MS:-3000}

asleep="SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 1668442469
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND objid = 1 AND mode = 'ExclusiveLock' AND granted"

start_serve wake --poll 30 --sleep-after 20ms
wait_for "$asleep" 60 "the idle daemon never fell asleep"

note "idle: commit -> claimed, 15 single emits, each after the daemon fell asleep"
sql "CREATE TABLE wake_commits (entity text PRIMARY KEY, committed timestamptz)" >/dev/null
for i in $(seq 15); do
    wait_for "$asleep" 30 "the daemon did not fall asleep again (round $i)"
    # the time is taken inside the emit's own statement, just before its commit:
    # the latency below includes the commit itself
    sql "WITH e AS (SELECT crier.emit('acme', 'invoice.created', 'idle_$i',
             '{\"invoice_id\": \"idle_$i\", \"amount_cents\": 1, \"currency\": \"EUR\"}'))
         INSERT INTO wake_commits SELECT 'idle_$i', clock_timestamp() FROM e" >/dev/null
    wait_for "SELECT count(*) = 1 FROM crier.events WHERE entity_id = 'idle_$i' AND state = 'done'" 10 \
        "idle emit $i was not claimed within 10 s"
done
lat=$(sql "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::int || ' ' || max(ms)::int FROM (
             SELECT extract(epoch FROM e.processed_at - c.committed) * 1000 AS ms
             FROM crier.events e JOIN wake_commits c ON c.entity = e.entity_id) t")
note "idle wake latency (commit -> claiming batch began): median ${lat% *} ms, max ${lat#* } ms"
[ "${lat#* }" -le "$IDLE_BOUND_MS" ] || fail "idle wake latency max ${lat#* } ms > $IDLE_BOUND_MS ms"

note "8 concurrent emitters, waves of transactions open 0-120 ms across the daemon's sleep/wake transitions"
sql "TRUNCATE wake_commits" >/dev/null
for w in $(seq 8); do
    {
        # waves every 400 ms: all emitters at once, transactions open 0-120 ms,
        # then ~250 ms of quiet in which the daemon falls asleep
        for i in $(seq 25); do
            hold=$(( (RANDOM % 5 == 0) ? 0 : RANDOM % 120 ))
            echo "SELECT pg_sleep(0.4 - (extract(epoch FROM clock_timestamp())::numeric % 0.4));"
            echo "BEGIN;"
            echo "SELECT crier.emit('acme', 'invoice.created', 'c_${w}_$i', '{\"invoice_id\": \"c_${w}_$i\", \"amount_cents\": 1, \"currency\": \"EUR\"}');"
            echo "SELECT pg_sleep($hold / 1000.0);"
            echo "COMMIT;"
            echo "INSERT INTO wake_commits VALUES ('c_${w}_$i', clock_timestamp());"
        done
    } >"$WORK/emitter.$w.sql"
    psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 -f "$WORK/emitter.$w.sql" >/dev/null &
    PIDS+=($!)
    emitters+=($!)
done
sleeps=0
while kill -0 "${emitters[@]}" 2>/dev/null; do
    [ "$(sql "$asleep")" = t ] && sleeps=$((sleeps + 1))
    sleep 0.05
done
for pid in "${emitters[@]}"; do wait "$pid" || fail "an emitter failed"; done
note "samples that found the daemon asleep while the emitters ran: $sleeps"
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state = 'pending'" 10 "events left behind (pending after 10 s)"
assert_eq 200 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id LIKE 'c\_%' AND state = 'done'")" \
    "every concurrent emit was fanned out"
late=$(sql "SELECT max(greatest(0, extract(epoch FROM e.processed_at - c.committed) * 1000))::int
            FROM crier.events e JOIN wake_commits c ON c.entity = e.entity_id")
note "concurrent: the latest event was claimed $late ms after its commit was logged"
if [ "$late" -gt "$LATE_BOUND_MS" ]; then
    sql "SELECT e.entity_id, e.lane, e.attempts, e.processed_at, c.committed FROM crier.events e
         JOIN wake_commits c ON c.entity = e.entity_id ORDER BY e.processed_at - c.committed DESC LIMIT 5" >&2
    grep -v " INFO rules: loaded" "$WORK/wake.log" | tail -20 >&2
    fail "an event waited $late ms (> $LATE_BOUND_MS ms): a lost wake-up, or a starved daemon (see above)"
fi
[ "$sleeps" -gt 0 ] || note "the daemon never slept while emitters ran (a busy machine); the bound still held"

kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "crier serve exited with an error"

# Under load the awake daemon looks every --linger instead of every
# --awake-poll (fewer, bigger batches); below half of --linger-rate it goes back. A
# batch's events share processed_at (its transaction's now()), so distinct
# values count batches.
note "under load (1,000 emits/s against --linger-rate 300): claims every 50 ms, bigger batches"
cat >"$WORK/load.sql" <<'SQL'
SELECT crier.emit('acme', 'invoice.created', 'load_' || :client_id || '_' || random(),
    '{"invoice_id": "x", "amount_cents": 1, "currency": "EUR"}');
SQL
CRIER_LOG=debug start_serve linger --poll 30 --sleep-after 200ms --linger 50ms --linger-rate 300 --no-deliver
wait_for "$asleep" 60 "the idle daemon never fell asleep"
pgbench -n -c 4 -j 2 -R 1000 -T 4 -f "$WORK/load.sql" "$CRIER_DATABASE_URL" >"$WORK/pgbench.log" 2>&1 ||
    { cat "$WORK/pgbench.log" >&2; fail "pgbench failed"; }
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state = 'pending'" 30 "load events left behind"
wait_for "$asleep" 10 "the daemon did not fall asleep after the load"
grep -q "under load: claiming every 50 ms" "$WORK/linger.log" ||
    { tail -20 "$WORK/linger.log" >&2; fail "1,000 emits/s did not make the daemon linger (--linger-rate 300)"; }
grep -q "load gone: probing every 2 ms" "$WORK/linger.log" ||
    { tail -20 "$WORK/linger.log" >&2; fail "the daemon did not go back to --awake-poll after the load"; }
IFS="|" read -r n_events n_batches <<<"$(sql "SELECT count(*), count(DISTINCT processed_at) FROM crier.events WHERE entity_id LIKE 'load\_%'")"
note "under load: $n_events events in $n_batches batches"
[ "$n_batches" -le $((n_events / 8)) ] || fail "$n_events events took $n_batches batches: no lingering"
note "after the load: an idle emit is claimed at once again"
sql "WITH e AS (SELECT crier.emit('acme', 'invoice.created', 'after_load',
         '{\"invoice_id\": \"after_load\", \"amount_cents\": 1, \"currency\": \"EUR\"}'))
     INSERT INTO wake_commits SELECT 'after_load', clock_timestamp() FROM e" >/dev/null
wait_for "SELECT count(*) = 1 FROM crier.events WHERE entity_id = 'after_load' AND state = 'done'" 10 \
    "the emit after the load was not claimed within 10 s"
ms=$(sql "SELECT greatest(0, extract(epoch FROM e.processed_at - c.committed) * 1000)::int
          FROM crier.events e JOIN wake_commits c ON c.entity = e.entity_id WHERE e.entity_id = 'after_load'")
[ "$ms" -le "$IDLE_BOUND_MS" ] || fail "after the load, an idle emit waited $ms ms (> $IDLE_BOUND_MS)"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "crier serve exited with an error"

# A backlog analyzed while pending (autovacuum analyzes a big insert): once it
# is drained the daemon must fall asleep, not claim on and on (once, claims
# that walked the primary key past every done event outlasted the 2-ms awake
# tick, each tick kicked the claim in flight again, and the daemon spun for as
# long as the statistics stayed stale).
note "a drained backlog of 8000 events, analyzed while pending: the daemon falls asleep"
sql "SELECT count(crier.emit('acme', 'invoice.created', 'b_' || g,
         jsonb_build_object('invoice_id', 'b_' || g, 'amount_cents', 1, 'currency', 'EUR')))
     FROM generate_series(1, 8000) g" >/dev/null
sql "ANALYZE crier.events" >/dev/null
start_serve drain --poll 30 --sleep-after 20ms --no-deliver
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state = 'pending'" 120 "the backlog was not drained in 120 s"
wait_for "$asleep" 5 "the daemon did not fall asleep within 5 s of draining the backlog"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "crier serve exited with an error"

# The statistics still say the 8000 events are pending: the claim must still
# read events_pending_lane, not walk the primary key past the done events (with
# "lane = p_lane" the planner took the primary key here: 2 -> 26 ms per claim
# of 500 over a 40,000-event backlog, growing as it drained).
note "the claim reads events_pending_lane with statistics taken while the backlog was pending"
sql "SELECT crier.emit('acme', 'invoice.created', 'after_backlog',
         '{\"invoice_id\": \"after_backlog\", \"amount_cents\": 1, \"currency\": \"EUR\"}')" >/dev/null
plan=$(psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 2>&1 <<'EOF'
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_level = notice;
BEGIN;
SELECT count(*) FROM crier.claim_events(500, 0::smallint);
SELECT count(*) FROM crier.claim_events(500, 1::smallint);
ROLLBACK;
EOF
)
claims=$(grep -c "Index Scan using events_pending_lane" <<<"$plan" || true)
if [ "$claims" -ne 2 ] || grep -q "events_pkey" <<<"$plan"; then
    printf '%s\n' "$plan" >&2
    fail "a claim did not read events_pending_lane (plans above)"
fi
echo "ok"
