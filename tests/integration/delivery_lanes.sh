#!/usr/bin/env bash
# A new delivery is not held behind the write of earlier results: the delivery
# worker has two connections, and news from the fan-out is claimed on the free
# one while the other writes (src/engine/delivery.c). The test holds a write
# back on purpose — the row of a delivery whose send is in flight is locked by
# another session, so its result write waits — and a ping emitted meanwhile
# must still reach the receiver before the lock is let go. With one connection
# the new ping waited for the write, and so for the lock.
. "$(dirname "$0")/../support/lib.sh"
new_db

start_receiver lanes --delays-ms 3000,0
ping_serve lanes "$RECEIVER_URL"
ping first
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE lease_until IS NOT NULL" 20 "the first send is in flight"
first_id=$(delivery_of first id)

# Hold the first delivery's row for 8 s: its result write (after the receiver
# answers, 3 s after the request) waits for this lock.
psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 >"$WORK/locker.out" 2>&1 <<SQL &
BEGIN;
SELECT id FROM crier.deliveries WHERE id = $first_id FOR UPDATE;
SELECT pg_sleep(8);
COMMIT;
SQL
LOCKER=$!
PIDS+=("$LOCKER")
locked_at=$(date +%s%N)
wait_for "SELECT count(*) = 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.relation = 'crier.deliveries'::regclass AND a.query LIKE '%pg_sleep(8)%'" 10 "the lock is taken"
# the result write of the first send is blocked once the receiver has answered
wait_for "SELECT count(*) >= 1 FROM pg_stat_activity
          WHERE application_name LIKE 'crier delivery%' AND wait_event_type = 'Lock'" 10 \
    "the first send's result write waits for the lock"

ping second
for _ in $(seq 40); do [ "$(requests_at "$RECEIVER_LOG")" -ge 2 ] && break; sleep 0.1; done
arrived_ms=$((($(date +%s%N) - locked_at) / 1000000))
assert_eq 2 "$(requests_at "$RECEIVER_LOG")" "the second ping reached the receiver while the first result write waited"
kill -0 "$LOCKER" 2>/dev/null || fail "the lock was let go (after 8 s) before the second ping arrived (${arrived_ms} ms)"
note "second ping at the receiver ${arrived_ms} ms after the lock was taken (the lock lasts 8 s)"

wait "$LOCKER" || fail "the locking session failed: $(cat "$WORK/locker.out")"
wait_for "SELECT count(*) = 2 FROM crier.deliveries WHERE state = 'delivered'" 20 "both delivered once the lock is gone"
assert_eq "1|1" "$(sql "SELECT count(*) FILTER (WHERE n.entity_id = 'first'), count(*) FILTER (WHERE n.entity_id = 'second')
                       FROM crier.delivery_attempts a JOIN crier.deliveries d ON d.id = a.delivery_id
                       JOIN crier.notifications n ON n.id = d.notification_id")" "one attempt each"
stop_serve
assert_eq 2 "$(receiver_ids | sort -u | wc -l)" "two distinct webhook-ids"
echo "ok"
