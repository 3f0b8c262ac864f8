#!/usr/bin/env bash
# The fan-out hands its batch's deliveries to the delivery side of its own
# process (src/engine/delivery.h, "the handoff"): the write inserts them
# leased (attempt 1), and they are sent right after the commit, without a
# claim. Checked here, each against what the claim did before:
#  - a ping is sent that way (the serve's final log: 1 handed, 0 claimed; one
#    attempt, number 1, attempts = 1 on the row);
#  - a delivery to a paused endpoint is not handed over and sent: it is parked
#    as the claim parks it (state paused, nothing reaches the receiver);
#  - crier serve --no-deliver hands nothing over: the delivery stays pending,
#    unleased, for another process;
#  - a handed delivery whose process is killed during the send is sent again
#    by another process once its lease has run out, under the same webhook-id;
#  - --max-inflight bounds handed sends as it bounds claimed ones: none is
#    refused by a full sender (which would kill the delivery).
. "$(dirname "$0")/../support/lib.sh"
new_db

# handed over
start_receiver handoff
ping_serve first "$RECEIVER_URL"
ping h1
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'delivered'" 20 "the ping is delivered"
stop_serve
grep -q "1 deliveries handed to the delivery side by their batch, 0 claimed" "$WORK/first.log" ||
    fail "the ping was not handed over by its batch: $(grep stopped "$WORK/first.log")"
assert_eq "1|1|delivered" "$(sql "SELECT d.attempts, a.attempt, a.outcome FROM crier.deliveries d
                                  JOIN crier.delivery_attempts a ON a.delivery_id = d.id")" \
    "one attempt, number 1"
target=$(delivery_of h1 target)

# a paused endpoint: not handed over, parked by the claim, nothing sent
sql "INSERT INTO crier.endpoints (tenant, channel, target, state, paused_at, next_probe_at)
     VALUES ('acme', 'webhook', '$target', 'paused', now(), now() + interval '1 hour')" >/dev/null
ping_serve paused "$RECEIVER_URL"
ping p1
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'paused'" 20 \
    "the delivery to the paused endpoint is parked"
sleep 0.5
stop_serve
assert_eq 1 "$(requests_at "$RECEIVER_LOG")" "requests at the receiver (the first ping's only)"
grep -q "0 deliveries handed to the delivery side by their batch" "$WORK/paused.log" ||
    fail "a delivery was handed over while an endpoint was paused: $(grep stopped "$WORK/paused.log")"
sql "DELETE FROM crier.endpoints" >/dev/null
sql "UPDATE crier.deliveries SET state = 'pending', due_at = now() WHERE state = 'paused'" >/dev/null

# --no-deliver: the delivery stays for another process, not leased
ping_serve parked "$RECEIVER_URL" --no-deliver
ping n1
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state = 'pending'" 20 "the parked serve fans out"
sleep 0.3
stop_serve
assert_eq "0|" "$(delivery_of n1 "attempts || '|' || coalesce(lease_until::text, '')")" \
    "the delivery of a --no-deliver serve: no attempt, no lease"

# killed during a handed-over send: another process sends it after the lease
sql "UPDATE crier.deliveries SET state = 'delivered' WHERE state = 'pending'" >/dev/null
start_receiver crash --delays-ms 30000,0
ping_serve victim "$RECEIVER_URL" --lease 2
ping k1
for _ in $(seq 100); do [ "$(requests_at "$RECEIVER_LOG")" -ge 1 ] && break; sleep 0.1; done
assert_eq 1 "$(requests_at "$RECEIVER_LOG")" "the send is in flight"
assert_eq "1|true" "$(delivery_of k1 "attempts || '|' || (lease_until IS NOT NULL)")" "in flight: attempt 1, leased"
kill -9 "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
ping_serve survivor "$RECEIVER_URL" --lease 2
wait_for "SELECT count(*) = 1 FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id = 'k1' AND d.state = 'delivered'" 30 "the killed send is delivered by the survivor"
stop_serve
assert_eq 2 "$(delivery_of k1 attempts)" "attempts of the killed send (1 lost with its process, 1 delivered)"
assert_eq "2 1" "$(receiver_ids | wc -l) $(receiver_ids | sort -u | wc -l)" \
    "requests and distinct webhook-ids at the receiver"
grep -q "0 deliveries handed to the delivery side by their batch, 1 claimed" "$WORK/survivor.log" ||
    fail "the survivor claimed the expired lease: $(grep stopped "$WORK/survivor.log")"

# --max-inflight bounds handed sends too: pings emitted one by one to a slow
# receiver, at most 4 sends at once; a send over the limit would be refused by
# the sender and the delivery would die. All are delivered, none dies.
sql "UPDATE crier.deliveries SET state = 'delivered' WHERE state = 'pending'" >/dev/null
start_receiver bounded --delay-ms 1000
ping_serve bounded "$RECEIVER_URL" --max-inflight 4
for i in $(seq 1 30); do ping "m$i"; sleep 0.02; done
wait_for "SELECT count(*) = 30 FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id LIKE 'm%' AND d.state IN ('delivered', 'dead')" 60 "the 30 pings are sent"
stop_serve
assert_eq "30|0" "$(sql "SELECT count(*) FILTER (WHERE d.state = 'delivered'), count(*) FILTER (WHERE d.state = 'dead')
                        FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                        WHERE n.entity_id LIKE 'm%'")" "delivered and dead of 30 pings at --max-inflight 4"
grep -q "refused before sending" "$WORK/bounded.log" && fail "a send was refused: $(grep -m3 refused "$WORK/bounded.log")"
grep -q "deliveries handed to the delivery side by their batch" "$WORK/bounded.log" || fail "no final log line"
counts=$(grep -o '[0-9]* deliveries handed to the delivery side by their batch, [0-9]* claimed' "$WORK/bounded.log")
note "at --max-inflight 4: $counts"
[ "$(echo "$counts" | grep -o '[0-9]* claimed' | grep -o '[0-9]*')" -gt 0 ] ||
    fail "with 4 sends in flight no ping waited for room (handed over past the limit?): $counts"
echo "ok"
