#!/usr/bin/env bash
# What guards notifications → events and deliveries → notifications since sql/014 dropped
# their foreign keys (the fan-out's write statement and crier.flush_digests hold the parent;
# statement-level triggers refuse deleting a referenced parent): a fanned-out event and its
# notification cannot be deleted or renumbered (SQLSTATE 23503, as before); children first,
# they can; a DELETE that races the fan-out waits for the batch and then fails; and after
# a fan-out no row lacks its parent. Since sql/021 the same holds for delivery_attempts →
# deliveries (crier.complete_deliveries updates the deliveries before it records their
# attempts): a delivery with attempts cannot be deleted or renumbered, a DELETE racing the
# result write waits for it and then fails, and no attempt lacks its delivery. Since sql/024
# the same holds for deliveries → digests, and a delivery cannot name a missing digest.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks

sql "SELECT count(crier.emit('globex', 'invoice.created', 'inv_' || i,
        jsonb_build_object('invoice_id', 'inv_' || i, 'amount_cents', i, 'currency', 'USD')))
     FROM generate_series(1, 200) AS i" >/dev/null
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/examples/rules" --set "billing_webhook_url=$RECEIVER_URL" \
    --exit-when-idle --no-deliver --batch-size 50 >"$WORK/serve.log" 2>&1 || fail "serve: $(tail "$WORK/serve.log")"
assert_eq 200 "$(sql "SELECT count(*) FROM crier.events WHERE state = 'done'")" "events done"
assert_eq 400 "$(sql "SELECT count(*) FROM crier.notifications")" "notifications (2 admins each)"
assert_eq 400 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'pending'")" "parked deliveries"
# No orphans: every notification has its event, every delivery its notification.
assert_eq 0 "$(sql "SELECT count(*) FROM crier.notifications n WHERE NOT EXISTS
                    (SELECT 1 FROM crier.events e WHERE e.id = n.event_id)")" "notifications without their event"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries d WHERE NOT EXISTS
                    (SELECT 1 FROM crier.notifications n WHERE n.id = d.notification_id)")" "deliveries without their notification"

# expect_23503 "SQL": the statement fails with foreign_key_violation and changes nothing.
expect_23503() {
    local out
    if out=$(psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "$1" 2>&1); then
        fail "expected SQLSTATE 23503 from: $1 (it succeeded: $out)"
    fi
    case "$out" in
    *23503*) note "refused as expected: $(echo "$out" | head -1)" ;;
    *) fail "expected SQLSTATE 23503 from: $1, got: $out" ;;
    esac
}
# expect_23503_while_held WHAT "SQL" "STATEMENT": a transaction runs SQL and holds its rows
# for 2 s before COMMIT; STATEMENT, sent meanwhile, must wait for that commit (at least 1 s)
# and then fail with foreign_key_violation.
expect_23503_while_held() {
    local log="$WORK/held.log" writer start waited
    { echo "BEGIN;"; echo "$2"; sleep 2; echo "COMMIT;"; } |
        psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 >"$log" 2>&1 &
    writer=$!
    sleep 0.5
    start=$(date +%s%N)
    expect_23503 "$3"
    waited=$((($(date +%s%N) - start) / 1000000))
    wait "$writer" || fail "$1 failed: $(cat "$log")"
    [ "$waited" -ge 1000 ] || fail "the statement did not wait for $1 (it returned after $waited ms): $3"
    note "waited $waited ms for $1, then refused: $3"
}
# The arguments of crier.complete_deliveries that record delivery $rid's attempt $ratt as delivered.
complete_args() {
    echo "ARRAY[$rid]::bigint[], ARRAY[$ratt], ARRAY['delivered'], ARRAY['ok'], ARRAY[204], ARRAY[NULL]::text[],
          ARRAY[NULL]::text[], ARRAY[0]::float8[], ARRAY[extract(epoch FROM now())]::float8[], ARRAY[1]::float8[],
          ARRAY[false], 20, 432000, 30"
}
event=$(sql "SELECT min(id) FROM crier.events")
notification=$(sql "SELECT min(id) FROM crier.notifications WHERE event_id = $event")
expect_23503 "DELETE FROM crier.events WHERE id = $event"
expect_23503 "DELETE FROM crier.events WHERE tenant = 'globex'"
expect_23503 "UPDATE crier.events SET id = -id WHERE id = $event"
expect_23503 "DELETE FROM crier.notifications WHERE id = $notification"
expect_23503 "UPDATE crier.notifications SET id = -id WHERE id = $notification"
assert_eq 200 "$(sql "SELECT count(*) FROM crier.events")" "events after the refused deletes"
assert_eq 400 "$(sql "SELECT count(*) FROM crier.notifications")" "notifications after the refused deletes"

# Children first, then the parents: allowed (what retention does).
sql "WITH n AS (SELECT id FROM crier.notifications WHERE event_id = $event),
          d AS (DELETE FROM crier.deliveries WHERE notification_id IN (SELECT id FROM n) RETURNING 1)
     SELECT count(*) FROM d" >/dev/null
sql "DELETE FROM crier.notifications WHERE event_id = $event"
sql "DELETE FROM crier.events WHERE id = $event"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE id = $event")" "the event, deleted after its children"
# An event without notifications, and a notification without deliveries, delete as before.
sql "SELECT crier.emit('globex', 'invoice.created', 'lonely', '{\"invoice_id\": \"lonely\", \"amount_cents\": 1, \"currency\": \"USD\"}'::jsonb)" >/dev/null
sql "DELETE FROM crier.events WHERE entity_id = 'lonely'"

# A DELETE racing a fan-out batch: the batch holds its events (claimed FOR UPDATE), so the
# DELETE waits until the batch commits, then finds the new notifications and fails.
sql "SELECT crier.emit('globex', 'invoice.created', 'race', '{\"invoice_id\": \"race\", \"amount_cents\": 1, \"currency\": \"USD\"}'::jsonb)" >/dev/null
race=$(sql "SELECT id FROM crier.events WHERE entity_id = 'race'")
expect_23503_while_held "the racing batch" \
    "SELECT id FROM crier.events WHERE id = $race FOR UPDATE;
     INSERT INTO crier.notifications (key_hash, key, event_id, tenant, event_type, entity_id, recipient_id)
     VALUES (gen_random_uuid(), 'race-key', $race, 'globex', 'invoice.created', 'race', 'someone');
     UPDATE crier.events SET state = 'done' WHERE id = $race;" \
    "DELETE FROM crier.events WHERE id = $race"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.notifications WHERE event_id = $race")" "the racing batch's notification"
# delivery_attempts → deliveries (sql/021). Deliver what is parked: every delivery gets an attempt.
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/examples/rules" --set "billing_webhook_url=$RECEIVER_URL" \
    --exit-when-idle >"$WORK/deliver.log" 2>&1 || fail "serve (delivering): $(tail "$WORK/deliver.log")"
delivered=$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'")
[ "$delivered" -ge 398 ] || fail "expected the parked deliveries delivered, got $delivered"
assert_eq "$delivered" "$(sql "SELECT count(*) FROM crier.delivery_attempts")" "one attempt per delivery"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.delivery_attempts a WHERE NOT EXISTS
                    (SELECT 1 FROM crier.deliveries d WHERE d.id = a.delivery_id)")" "attempts without their delivery"
delivery=$(sql "SELECT min(delivery_id) FROM crier.delivery_attempts")
expect_23503 "DELETE FROM crier.deliveries WHERE id = $delivery"
expect_23503 "DELETE FROM crier.deliveries WHERE state = 'delivered'"
expect_23503 "UPDATE crier.deliveries SET id = -id WHERE id = $delivery"
assert_eq "$delivered" "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'")" \
    "deliveries after the refused deletes"
# Attempts first, then the delivery, in one statement: allowed (what crier.retain does).
sql "WITH a AS (DELETE FROM crier.delivery_attempts WHERE delivery_id = $delivery)
     DELETE FROM crier.deliveries WHERE id = $delivery" >/dev/null
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries WHERE id = $delivery")" "the delivery, deleted after its attempts"

# A DELETE racing the result write: crier.complete_deliveries holds the delivery it updated
# until commit, so the DELETE waits, then finds the attempt and fails.
sql "SELECT crier.emit('globex', 'invoice.created', 'race2', '{\"invoice_id\": \"race2\", \"amount_cents\": 1, \"currency\": \"USD\"}'::jsonb)" >/dev/null
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/examples/rules" --set "billing_webhook_url=$RECEIVER_URL" \
    --exit-when-idle --no-deliver >"$WORK/race2.log" 2>&1 || fail "serve (race2): $(tail "$WORK/race2.log")"
claimed=$(sql "SELECT id || ' ' || attempts FROM crier.claim_deliveries(1, 60, 30)")
[ -n "$claimed" ] || fail "no delivery of race2 to claim"
read -r rid ratt <<<"$claimed"
expect_23503_while_held "the racing result write" \
    "SELECT applied FROM crier.complete_deliveries($(complete_args));" \
    "DELETE FROM crier.deliveries WHERE id = $rid"
assert_eq "1 delivered" "$(sql "SELECT (SELECT count(*) FROM crier.delivery_attempts WHERE delivery_id = $rid) || ' ' || state
                                FROM crier.deliveries WHERE id = $rid")" "the raced delivery and its attempt"
# The same results written again (a worker whose commit's outcome was lost with its
# connection writes them once more): nothing is applied twice, no attempt is recorded twice,
# and the statement succeeds.
assert_eq 0 "$(sql "SELECT applied FROM crier.complete_deliveries($(complete_args))")" \
    "results written again apply to nothing"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.delivery_attempts WHERE delivery_id = $rid")" \
    "the attempt, recorded once after its results were written twice"

# deliveries → digests (sql/024): a trigger that fires only for rows naming a digest.
# A delivery cannot name a missing digest (insert or update); a digest that deliveries name
# cannot be deleted or renumbered; a DELETE racing the transaction that named it waits, then fails.
digest=$(sql "INSERT INTO crier.digests (tenant, recipient_id, channel, digest_key, event_type, window_start, window_end)
              VALUES ('globex', 'admin_1', 'webhook', 'refs', 'invoice.created', now(), now() + interval '1 hour')
              RETURNING id")
parked=$(sql "SELECT min(id) FROM crier.deliveries WHERE state = 'pending'")
[ -n "$parked" ] || fail "no parked delivery left to name a digest"
expect_23503 "UPDATE crier.deliveries SET digest_id = $digest + 1000 WHERE id = $parked"
expect_23503 "INSERT INTO crier.deliveries (notification_id, tenant, channel, message_id, target, body, state, digest_id)
              SELECT notification_id, tenant, 'refs', message_id, target, body, 'digested', $digest + 1000
              FROM crier.deliveries WHERE id = $parked"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries WHERE channel = 'refs' OR digest_id IS NOT NULL")" \
    "deliveries naming a digest after the refused writes"
expect_23503_while_held "the update naming the digest" \
    "UPDATE crier.deliveries SET digest_id = $digest WHERE id = $parked;" \
    "DELETE FROM crier.digests WHERE id = $digest"
expect_23503 "DELETE FROM crier.digests WHERE tenant = 'globex'"
expect_23503 "UPDATE crier.digests SET id = -id WHERE id = $digest"
assert_eq "$digest" "$(sql "SELECT digest_id FROM crier.deliveries WHERE id = $parked")" "the delivery's digest"
# Unnamed first, then the digest: allowed.
sql "UPDATE crier.deliveries SET digest_id = NULL WHERE id = $parked" >/dev/null
sql "DELETE FROM crier.digests WHERE id = $digest" >/dev/null
assert_eq 0 "$(sql "SELECT count(*) FROM crier.digests WHERE id = $digest")" "the digest, deleted once unnamed"
echo "ok"
