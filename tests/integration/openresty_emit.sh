#!/usr/bin/env bash
# Emitting from nginx handlers (crier.nginx.emit, crier.nginx.transaction)
# against real PostgreSQL: an order row and its order.created event commit
# together, and a handler error after both leaves neither; 8 concurrent
# clients repeating one dedupe key create one event and all get its id;
# malformed input is refused with crier.emit's SQLSTATE and changes nothing;
# a not_before time stores a scheduled event, processed at that time, and a
# malformed one is refused (22023); the events reach a webhook receiver through crier serve like any other.
. "$(dirname "$0")/../support/lib.sh"
. "$CRIER_SOURCE_DIR/tests/support/nginx/nginx.sh"

new_db
sql "CREATE SCHEMA app;
     CREATE TABLE app.orders (id text PRIMARY KEY, customer text NOT NULL, total_cents bigint NOT NULL)" >/dev/null
RULES_DIR="$WORK/rules"
mkdir -p "$RULES_DIR"
cat >"$RULES_DIR/orders.lua" <<'LUA'
local crier = require "crier"
crier.event_type "order.created" { payload = { order_id = "string", customer = "string", total_cents = "integer" } }
crier.event_type "note" { payload = { text = "string?" } }
crier.rule "order.created" {
    recipients = function(event) return { event.payload.customer } end,
    channels = { "webhook" },
    webhook = { url = crier.setting("orders_url", "http://127.0.0.1:9/none"), retry = { 0, "1s" } },
}
LUA
start_nginx "$NGINX_SUPPORT/openresty.conf.in"

# --- One transaction: the order and its event, or neither -------------------
get "/order?id=ord_1&customer=alice&total=1250" -X POST
assert_eq 200 "$STATUS" "order: $BODY"
event_id=$(json_field "$BODY" event_id)
assert_eq "ord_1|alice|1250" "$(sql "SELECT id, customer, total_cents FROM app.orders")" "the order row"
assert_eq "acme|order.created|ord_1|order:ord_1" \
    "$(sql "SELECT tenant, event_type, entity_id, dedupe_key FROM crier.events WHERE id = $event_id")" "its event"

get "/order?id=ord_2&customer=bob&total=99&fail=1" -X POST
assert_eq 500 "$STATUS" "a handler error after the insert and the emit: $BODY"
grep -q "the handler failed after the insert" <<<"$BODY" || fail "the raised error: $BODY"
assert_eq 0 "$(sql "SELECT count(*) FROM app.orders WHERE id = 'ord_2'")" "no order row after the rollback"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'ord_2'")" "no event after the rollback"

# The same order again: the insert fails (23505) and nothing is emitted.
get "/order?id=ord_1&customer=alice&total=1250" -X POST
assert_eq 409 "$STATUS" "a duplicate order: $BODY"
assert_eq 23505 "$(json_field "$BODY" sqlstate)" "a duplicate order's SQLSTATE"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.events")" "still one event"

# --- 8 concurrent clients, one dedupe key: one event, one id ----------------
curls=()
for i in $(seq 8); do
    curl -s -X POST --data-binary "{\"text\":\"try $i\"}" \
        "$BASE/emit?tenant=acme&type=note&entity=n_1&dedupe=note-key-1" >"$WORK/dup.$i" &
    curls+=($!)
done
wait "${curls[@]}"
ids=$(for i in $(seq 8); do json_field "$(cat "$WORK/dup.$i")" id; done | sort -u)
[ "$(echo "$ids" | wc -l)" = 1 ] && [ -n "$ids" ] || fail "8 concurrent emits: ids $(cat "$WORK"/dup.*)"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.events WHERE dedupe_key = 'note-key-1'")" "one event for the key"
assert_eq "$ids" "$(sql "SELECT id FROM crier.events WHERE dedupe_key = 'note-key-1'")" "the id they all got"

# --- Bad input: crier.emit's refusal, nothing stored --------------------------
get "/emit?tenant=acme&type=bad%20type&entity=x" -X POST --data-binary '{}'
assert_eq 400 "$STATUS" "an invalid event type: $BODY"
assert_eq 22023 "$(json_field "$BODY" sqlstate)" "an invalid event type's SQLSTATE"
get "/emit?tenant=acme&type=note&entity=x" -X POST --data-binary '[1,2]'
assert_eq 22023 "$(json_field "$BODY" sqlstate)" "a payload that is not an object: $BODY"
get "/emit?tenant=acme&type=note&entity=x" -X POST --data-binary '{"text": '
assert_eq 22P02 "$(json_field "$BODY" sqlstate)" "malformed JSON: $BODY"
hostile="x'); DELETE FROM crier.events; --"
get "/emit?type=note&entity=h&tenant=$(/usr/bin/python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$hostile")" \
    -X POST --data-binary '{"text":"<b>{{x}}</b>"}'
assert_eq 200 "$STATUS" "a hostile tenant id: $BODY"
assert_eq "$hostile|{\"text\": \"<b>{{x}}</b>\"}" \
    "$(sql "SELECT tenant, payload FROM crier.events WHERE id = $(json_field "$BODY" id)")" "stored literally"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.events")" "three events in all"

# --- A scheduled send: not_before (RFC 3339 with its offset) ----------------
due=$(sql "SELECT to_char((now() + interval '4 s') AT TIME ZONE 'Asia/Kolkata', 'YYYY-MM-DD\"T\"HH24:MI:SS\"+05:30\"')")
get "/emit?tenant=acme&type=note&entity=later&not_before=${due/+/%2B}" -X POST --data-binary '{}'
assert_eq 200 "$STATUS" "a scheduled emit: $BODY"
later_id=$(json_field "$BODY" id)
assert_eq "scheduled|t" "$(sql "SELECT state, not_before = '$due' FROM crier.events WHERE id = $later_id")" \
    "stored scheduled at its time"
get "/emit?tenant=acme&type=note&entity=never&not_before=tomorrow" -X POST --data-binary '{}'
assert_eq 400 "$STATUS" "a bad not_before: $BODY"
assert_eq 22023 "$(json_field "$BODY" sqlstate)" "a bad not_before's SQLSTATE"
grep -q "not_before must be an RFC 3339 time" <<<"$BODY" || fail "the bad not_before's message: $BODY"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'never'")" "nothing stored"

# --- The events reach webhooks through crier serve --------------------------
start_receiver hooks
"$CRIER_BIN" serve --rules "$RULES_DIR" --poll 0.2 --set "orders_url=$RECEIVER_URL" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'delivered'" 20 "the order's webhook was not delivered"
grep -q '"order_id": *"ord_1"' "$RECEIVER_LOG" || grep -q 'ord_1' "$RECEIVER_LOG" ||
    fail "the receiver did not get ord_1: $(cat "$RECEIVER_LOG")"
assert_eq 1 "$(requests_at "$RECEIVER_LOG")" "one webhook request"
receiver_ids | grep -q '^msg_' || fail "the webhook carries its notification's id: $(receiver_ids)"
wait_for "SELECT state = 'done' FROM crier.events WHERE id = $later_id" 20 "the scheduled note was not processed"
assert_eq t "$(sql "SELECT processed_at >= not_before FROM crier.events WHERE id = $later_id")" "not before its time"
stop_serve

stop_nginx
nginx_log_clean
echo "ok"
