#!/usr/bin/env bash
# crier.event_queue and crier.dead_events (sql/025_event_queue.sql) follow crier.events
# whoever writes them: an event an operator marks dead or done by hand is not fanned out
# (its queue row is dropped by the claim) and a dead one is listed as a dead letter; one
# made due later waits; a replayed one is fanned out; and marking events done is a HOT
# update (no new index entries for crier.events), which is what the queue is for.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks

sql "SELECT count(crier.emit('globex', 'invoice.created', 'inv_' || i,
        jsonb_build_object('invoice_id', 'inv_' || i, 'amount_cents', i, 'currency', 'USD')))
     FROM generate_series(1, 200) AS i" >/dev/null
assert_eq 200 "$(sql "SELECT count(*) FROM crier.event_queue")" "queue rows of 200 emitted events"
ev() { sql "SELECT id FROM crier.events WHERE entity_id = 'inv_$1'"; }
DEAD=$(ev 1) DONE=$(ev 2) LATER=$(ev 3)

note "by hand: one event dead, one done, one due in an hour"
sql "UPDATE crier.events SET state = 'dead', last_error = 'quarantined by hand', processed_at = now() WHERE id = $DEAD" >/dev/null
sql "UPDATE crier.events SET state = 'done', processed_at = now() WHERE id = $DONE" >/dev/null
sql "UPDATE crier.events SET available_at = now() + interval '1 hour' WHERE id = $LATER" >/dev/null
assert_eq 1 "$(sql "SELECT count(*) FROM crier.dead_events WHERE id = $DEAD AND tenant = 'globex'")" "the dead list holds the event marked dead"
assert_eq "event $DEAD" "$(sql "SELECT kind || ' ' || id FROM crier.dead_letters(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")" \
    "the dead letters list the event marked dead"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.event_queue WHERE id = $LATER AND available_at > now() + interval '59 minutes'")" \
    "the queue row of the event due later moved with it"

stats() { sql "SELECT n_tup_upd || ' ' || n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'crier.events'::regclass"; }
read -r upd0 hot0 <<<"$(stats)"
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/examples/rules" --set "billing_webhook_url=$RECEIVER_URL" \
    --exit-when-idle --no-deliver --batch-size 50 >"$WORK/serve.log" 2>&1 || fail "serve: $(tail "$WORK/serve.log")"
assert_eq 197 "$(sql "SELECT count(DISTINCT event_id) FROM crier.notifications")" "events fanned out (all but the three)"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.notifications WHERE event_id IN ($DEAD, $DONE, $LATER)")" \
    "notifications of the events marked dead, done or due later"
assert_eq "dead done pending" "$(sql "SELECT string_agg(state, ' ' ORDER BY id) FROM crier.events WHERE id IN ($DEAD, $DONE, $LATER)")" \
    "states of the three"
assert_eq "$LATER" "$(sql "SELECT string_agg(id::text, ',') FROM crier.event_queue")" "the queue holds only the event due later"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.pending_events")" "pending events"

# The serve's backends have exited, so their statistics are in.
wait_for "SELECT n_tup_upd >= $upd0 + 197 FROM pg_stat_user_tables WHERE relid = 'crier.events'::regclass" 10 \
    "the statistics of the serve's updates did not arrive"
read -r upd1 hot1 <<<"$(stats)"
note "crier.events updates during the fan-out: $((upd1 - upd0)), HOT: $((hot1 - hot0))"
[ $((hot1 - hot0)) -ge $(((upd1 - upd0) * 9 / 10)) ] || fail "fewer than 90 % of the done marks were HOT updates"

note "replay the dead event: it leaves the dead list, enters the queue, and is fanned out"
"$CRIER_BIN" dead replay --event "$DEAD" >"$WORK/replay.log" 2>&1 || fail "replay: $(cat "$WORK/replay.log")"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.dead_events")" "dead list after the replay"
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/examples/rules" --set "billing_webhook_url=$RECEIVER_URL" \
    --exit-when-idle --no-deliver >"$WORK/serve2.log" 2>&1 || fail "serve: $(tail "$WORK/serve2.log")"
assert_eq done "$(sql "SELECT state FROM crier.events WHERE id = $DEAD")" "the replayed event"
assert_eq 2 "$(sql "SELECT count(*) FROM crier.notifications WHERE event_id = $DEAD")" "its notifications (2 admins)"

note "an event inserted dead (an import) is listed; one inserted pending is queued"
sql "INSERT INTO crier.events (tenant, event_type, entity_id, dedupe_key, state, last_error, processed_at)
     VALUES ('globex', 'invoice.created', 'imported', 'imported-dead', 'dead', 'imported', now()),
            ('globex', 'invoice.created', 'imported2', 'imported-pending', 'pending', NULL, NULL)" >/dev/null
assert_eq 1 "$(sql "SELECT count(*) FROM crier.dead_events d JOIN crier.events e USING (id) WHERE e.entity_id = 'imported'")" \
    "dead list of the event inserted dead"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.event_queue q JOIN crier.events e USING (id) WHERE e.entity_id = 'imported2'")" \
    "queue of the event inserted pending"
echo ok
