#!/usr/bin/env bash
# The fast lane's claim starts at its floor (sql/functions/claim_floor.sql), not
# at the first entry of events_pending_lane: after a backlog, the index's
# left-hand pages keep the killed entries of done events until VACUUM, and a
# claim from the first entry stepped over all of them. The floor must never
# pass an event that can still become claimable: one whose transaction is
# still open (its id was drawn before later ones that commit first), or one
# made pending again (a scheduled send that fires). (Its events are of a type
# the rules do not know: each is claimed once and quarantined, which is all
# this test needs of the fan-out.)
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
sql "ALTER TABLE crier.events SET (autovacuum_enabled = off)"

# A refresh now (the daemon's claims refresh at most once a second).
refresh() {
    sql "UPDATE crier.claim_floor SET refreshed_at = '-infinity'" >/dev/null
    sql "SELECT crier.claim_floor_refresh(0::smallint)" >/dev/null
}
floor() { sql "SELECT crier.claim_floor(0::smallint)"; }
# Buffers the claim's function reads (its second call in the session: no planning).
claim_buffers() {
    psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 \
        -c "SELECT count(*) FROM crier.claim_events(100, 0::smallint)" \
        -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT * FROM crier.claim_events(100, 0::smallint)" |
        sed -n 's/.*Buffers: shared hit=\([0-9]*\).*/\1/p' | head -1
}

note "a backlog of 20,000 events fanned out to nobody, no vacuum"
sql "SELECT count(crier.emit('acme', 'unrouted', 'backlog-' || i)) FROM generate_series(1, 20000) AS i" >/dev/null
ping_serve serve "$RECEIVER_URL"
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state = 'pending'" 120 "the backlog was not fanned out"
stop_serve
refresh
refresh
max_id=$(sql "SELECT max(id) FROM crier.events")
f=$(floor)
[ "$f" -gt "$max_id" ] || fail "after the backlog the floor is $f, not above the last event $max_id"
with_floor=$(claim_buffers)
sql "UPDATE crier.claim_floor SET floor = 0" >/dev/null
from_first=$(claim_buffers)
note "a claim reads $with_floor buffers from the floor, $from_first from the lane's first entry"
[ "$from_first" -gt 30 ] || fail "a claim from the first entry read only $from_first buffers: no killed entries to step over, the test proves nothing"
[ "$with_floor" -lt 10 ] || fail "a claim from the floor read $with_floor buffers"
refresh
[ "$(floor)" -gt "$max_id" ] || fail "the floor did not come back above $max_id"

note "an event whose transaction stays open while later ones are fanned out"
psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 \
    -c "BEGIN" -c "SELECT crier.emit('acme', 'unrouted', 'held')" -c "SELECT pg_sleep(8)" -c "COMMIT" \
    >"$WORK/held.out" &
held_pid=$!
sleep 0.5
ping_serve serve2 "$RECEIVER_URL"
# Each sample: the floor, and whether the held event was still uncommitted in the
# same snapshot (then it was at the refresh before, too). How long the samples
# take depends on the machine: only those taken while it was open are judged.
: >"$WORK/floors"
for i in $(seq 1 6); do
    sql "SELECT count(crier.emit('acme', 'unrouted', 'later-$i-' || j)) FROM generate_series(1, 50) AS j" >/dev/null
    sleep 0.3
    refresh
    sql "SELECT crier.claim_floor(0::smallint) || ' ' ||
                NOT EXISTS (SELECT FROM crier.events WHERE tenant = 'acme' AND entity_id = 'held')" >>"$WORK/floors"
done
wait "$held_pid" || fail "the held transaction failed: $(cat "$WORK/held.out")"
held_id=$(head -1 "$WORK/held.out")
[ -n "$held_id" ] || fail "no id from the held transaction"
later_min=$(sql "SELECT min(id) FROM crier.events WHERE entity_id LIKE 'later-%'")
[ "$later_min" -gt "$held_id" ] || fail "the later events ($later_min) do not have ids above the held one ($held_id)"
judged=0
while read -r f open; do
    [ "$open" = true ] || continue
    judged=$((judged + 1))
    [ "$f" -le "$held_id" ] || fail "the floor rose to $f while event $held_id was uncommitted (floor, open: $(tr '\n' ' ' <"$WORK/floors"))"
done <"$WORK/floors"
note "$judged floor samples taken while the held transaction was open"
[ "$judged" -ge 3 ] || fail "only $judged floor samples while the held transaction was open: the test proves nothing"
wait_for "SELECT state <> 'pending' FROM crier.events WHERE id = $held_id" 10 "the held event $held_id was not claimed after its commit"
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state = 'pending'" 30 "events left pending"
stop_serve
refresh
refresh
after=$(floor)
[ "$after" -gt "$held_id" ] || fail "once everything was done the floor ($after) did not pass the held event ($held_id)"

note "a scheduled send below the floor, fired"
sched_id=$(sql "SELECT crier.emit('acme', 'unrouted', 'scheduled', '{}', NULL, now() + interval '1 second')")
sql "SELECT count(crier.emit('acme', 'unrouted', 'more-' || j)) FROM generate_series(1, 10) AS j" >/dev/null
sql "UPDATE crier.events SET state = 'done' WHERE state = 'pending'" >/dev/null
refresh
refresh
[ "$(floor)" -gt "$sched_id" ] || fail "the floor ($(floor)) did not pass the scheduled event $sched_id"
sleep 1.2
fired=$(sql "SELECT count(*) FROM crier.fire_timers(100) WHERE kind = 'send'")
assert_eq 1 "$fired" "scheduled sends fired"
[ "$(floor)" -le "$sched_id" ] || fail "the fired send $sched_id is below the floor $(floor)"
assert_eq t "$(sql "SELECT crier.events_waiting(0::smallint)")" "the awake probe sees the fired send"
assert_eq "$sched_id" "$(sql "SELECT id FROM crier.claim_events(100, 0::smallint)")" "the claim finds the fired send"
refresh
[ "$(floor)" -le "$sched_id" ] || fail "a refresh lost the fired send $sched_id (floor $(floor))"
note "events emptied by TRUNCATE ... RESTART IDENTITY: new ids start under the old floor"
sql "UPDATE crier.events SET state = 'done' WHERE state = 'pending'" >/dev/null
refresh
refresh
old_floor=$(floor)
[ "$old_floor" -gt 100 ] || fail "the floor ($old_floor) is not above the first ids: the test proves nothing"
sql "TRUNCATE crier.events RESTART IDENTITY CASCADE" >/dev/null
assert_eq 0 "$(floor)" "the floor after TRUNCATE"
sql "SELECT count(crier.emit('acme', 'unrouted', 'again-' || j)) FROM generate_series(1, 20) AS j" >/dev/null
assert_eq t "$(sql "SELECT crier.events_waiting(0::smallint)")" "the awake probe sees the new events"
# What went wrong before: a daemon that exits when idle found nothing to do and left.
ping_serve serve3 "$RECEIVER_URL" --exit-when-idle
wait "$SERVE_PID" || fail "crier serve --exit-when-idle failed: $(tail -5 "$WORK/serve3.log")"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE state = 'pending'")" \
    "events left pending by crier serve --exit-when-idle after TRUNCATE"

note "the sequence set back by hand (no TRUNCATE): the next refresh starts the floor over"
refresh
refresh
high=$(floor)
[ "$high" -gt 20 ] || fail "the floor ($high) did not rise past the new events: the test proves nothing"
sql "DELETE FROM crier.events" >/dev/null
sql "ALTER SEQUENCE crier.events_id_seq RESTART WITH 1" >/dev/null
sql "SELECT count(crier.emit('acme', 'unrouted', 'restart-' || j)) FROM generate_series(1, 5) AS j" >/dev/null
refresh
assert_eq 0 "$(floor)" "the floor after the sequence was set back"
assert_eq 5 "$(sql "SELECT count(*) FROM crier.claim_events(100, 0::smallint)")" "events the claim finds after the restart"
echo "ok"
