#!/usr/bin/env bash
# While no backlog is being drained, the delivery worker writes the results of
# its sends together: a result waits up to 5 ms (RESULT_LINGER_S in
# src/engine/delivery.c) for others, so that a trickle of deliveries does not
# cost one crier.complete_deliveries and one durable commit each. The sends
# themselves are not delayed.
#   1. a lone delivery: its result is written 5 ms or more after its answer
#      came, and well within a second;
#   2. pings emitted a few ms apart (each in its own transaction, so each is
#      sent alone): their results share writes (deliveries.delivered_at is the
#      writing transaction's start, so results written together share it);
#      written one by one, most writes would carry a single result.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
ping_serve serve "$RECEIVER_URL"

ping warm
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'delivered'" 30 "the warm-up ping was not delivered"

note "a lone delivery"
ping lone
wait_for "SELECT count(*) = 2 FROM crier.deliveries WHERE state = 'delivered'" 30 "the lone ping was not delivered"
gap=$(sql "SELECT round(extract(epoch FROM d.delivered_at - a.started_at) * 1000 - a.duration_ms)::int
           FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
           JOIN crier.delivery_attempts a ON a.delivery_id = d.id
           WHERE n.entity_id = 'lone'")
note "the answer came, then the result was written ${gap} ms later"
[ "$gap" -ge 4 ] || fail "the lone result was written ${gap} ms after its answer: it did not wait for others (5 ms)"
[ "$gap" -le 1000 ] || fail "the lone result was written ${gap} ms after its answer: the wait is 5 ms"

note "30 pings a few ms apart, each its own transaction"
for i in $(seq 30); do
    echo "SELECT crier.emit('acme', 'ping', 'trickle_$i');"
    echo "SELECT pg_sleep(0.001);"
done >"$WORK/trickle.sql"
psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 -f "$WORK/trickle.sql" >/dev/null
wait_for "SELECT count(*) = 32 FROM crier.deliveries WHERE state = 'delivered'" 30 "the pings were not delivered"
writes=$(sql "SELECT count(DISTINCT d.delivered_at) FROM crier.deliveries d
              JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id LIKE 'trickle_%'")
alone=$(sql "SELECT count(*) FROM (SELECT d.delivered_at FROM crier.deliveries d
              JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id LIKE 'trickle_%'
              GROUP BY d.delivered_at HAVING count(*) = 1) w")
sent=$(sql "SELECT count(*) FROM crier.delivery_attempts a JOIN crier.deliveries d ON d.id = a.delivery_id
            JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id LIKE 'trickle_%'")
span=$(sql "SELECT round(extract(epoch FROM max(a.started_at) - min(a.started_at)) * 1000)::int
            FROM crier.delivery_attempts a JOIN crier.deliveries d ON d.id = a.delivery_id
            JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id LIKE 'trickle_%'")
note "30 results (sent over $span ms) in $writes writes, $alone of them with a single result"
assert_eq 30 "$sent" "one attempt per ping"
# Written one by one (no wait), 12-28 of 14-29 writes carried a single result here;
# with the wait, 0-3.
[ "$alone" -le 8 ] || fail "$alone of $writes writes carried a single result: results sent a few ms apart were not written together"
stop_serve
grep -q "ERROR" "$WORK/serve.log" && fail "crier serve logged an error: $(grep ERROR "$WORK/serve.log" | head -3)"
note "ok"
