#!/usr/bin/env bash
# Digests, exactly once. 8 database sessions emit 2,000 comment events for 50
# recipients while two `crier serve` workers run: one digest per recipient and
# window, every event in exactly one digest, one request per digest at the
# receiver. Then a flush is made slow (the rule's rendering spins), a worker
# is killed with kill -9 in the middle of it and events are emitted while it
# runs: after a restart still one digest per window, nothing lost, and the
# events emitted during the flush are in later windows.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "comment.created" { payload = { to = "string", n = "integer", slow = "boolean?" } }
local function spin(seconds)
    local t = os.clock() + seconds
    while os.clock() < t do end
end
crier.rule "comment.created" {
    recipients = function(event) return { event.payload.to } end,
    channels = { "webhook" },
    webhook = {
        url = crier.setting("url"),
        digest = {
            window = "3s",
            body = function(event)
                if event.digest.last.payload.slow then spin(0.2) end
                local ids = {}
                for i, item in ipairs(event.digest.items) do ids[i] = item.id end
                return { to = event.digest.items[1].payload.to, count = event.digest.count, ids = ids,
                         first = event.digest.first.id, last = event.digest.last.id }
            end,
        },
    },
}
LUA

SERVES=()
serve() { # NAME
    "$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" --batch-size 40 >"$WORK/$1.log" 2>&1 &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    SERVES+=("$SERVE_PID")
}

# emit_all FROM TO SLOW: events n = FROM..TO for u0..u49, from 8 sessions at once
emit_all() {
    local s pids=()
    for s in $(seq 0 7); do
        sql "SELECT count(crier.emit('acme', 'comment.created', 'c' || n,
                jsonb_build_object('to', 'u' || (n % 50), 'n', n, 'slow', $3)))
             FROM generate_series($1 + $s, $2, 8) AS n" >/dev/null &
        pids+=($!)
    done
    for s in "${pids[@]}"; do wait "$s" || fail "an emitting session failed"; done
}

# check_exactly_once EVENTS: every event in exactly one sent digest, one
# notification and one delivered request per digest.
check_exactly_once() {
    wait_for "SELECT count(*) = $1 FROM crier.events WHERE state = 'done'" 120 "events not fanned out"
    wait_for "SELECT count(*) = 0 FROM crier.digests WHERE state <> 'sent'" 120 "digests not sent"
    wait_for "SELECT count(*) = 0 FROM crier.deliveries WHERE state IN ('pending', 'sending', 'timing')" 120 \
        "digest deliveries not delivered"
    assert_eq "$1" "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'digested'")" "items digested"
    assert_eq "$1" "$(sql "SELECT sum(items) FROM crier.digests")" "items counted by their digests"
    assert_eq 0 "$(sql "SELECT count(*) FROM crier.digests g WHERE g.items <>
                        (SELECT count(*) FROM crier.deliveries d WHERE d.digest_id = g.id)")" \
        "each digest holds the items that joined it"
    local digests
    digests=$(sql "SELECT count(*) FROM crier.digests")
    assert_eq "$digests" "$(sql "SELECT count(DISTINCT notification_id) FROM crier.digests")" \
        "one notification per digest"
    assert_eq "$digests" "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'")" \
        "one delivery per digest"
    assert_eq 0 "$(sql "SELECT count(*) FROM (SELECT 1 FROM crier.digests GROUP BY tenant, recipient_id, channel,
                        digest_key, window_start HAVING count(*) > 1) x")" "one digest per window"
    receiver_ids >"$WORK/ids"
    assert_eq "$digests" "$(sort -u "$WORK/ids" | wc -l)" "distinct webhook-ids at the receiver"
    # every event id exactly once across the digests the receiver got (a
    # redelivery after a crash repeats a webhook-id: count each id once)
    /usr/bin/python3 - "$RECEIVER_LOG" "$1" <<'PY' || fail "events missing or repeated across digests"
import json, sys
seen, ids = {}, {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    ids[r["headers"]["webhook-id"]] = json.loads(r["body"])
count = {}
for body in ids.values():
    assert body["count"] == len(body["ids"]), body
    assert body["first"] == body["ids"][0] and body["last"] == body["ids"][-1], body
    for i in body["ids"]:
        count[i] = count.get(i, 0) + 1
bad = {i: c for i, c in count.items() if c != 1}
if bad or len(count) != int(sys.argv[2]):
    print("events in digests:", len(count), "expected", sys.argv[2], "repeated:", list(bad.items())[:5])
    sys.exit(1)
PY
}

# 1. Two workers, 8 sessions, 2,000 events.
serve w1
serve w2
emit_all 1 2000 false
check_exactly_once 2000
note "phase 1: $(sql "SELECT count(*) FROM crier.digests") digests for 50 recipients"

# 2. A slow flush, killed with kill -9; events emitted while it runs and
# fanned out by the other worker, whose joins wait for the flush's locks.
emit_all 2001 2500 true
# the worker inside the flush: its timers connection is in the transaction
# that holds the due digests it claimed while the rules render them
flushing="SELECT split_part(application_name, ' ', 3) FROM pg_stat_activity WHERE pid <> pg_backend_pid()
          AND application_name LIKE 'crier timers %' AND state = 'idle in transaction'
          AND query LIKE '%FROM crier.fire_timers(%'"
wait_for "SELECT count(*) > 0 FROM ($flushing) f" 60 "the flush did not start"
victim=$(sql "$flushing" | head -1)
before=$(sql "SELECT max(window_start) FROM crier.digests")
emit_all 2501 2600 false
# (the worker renders 0.5 s of digests per pass: kill it inside one of them)
killed=""
for _ in $(seq 100); do
    if sql "$flushing" | grep -qx "$victim"; then
        kill -9 "$victim"
        killed=yes
        break
    fi
    sleep 0.05
done
[ -n "$killed" ] || fail "worker $victim is no longer flushing: make the rendering slower"
wait "$victim" 2>/dev/null || true
note "killed worker $victim during the flush: $(sql "SELECT count(*) FROM crier.digests WHERE state <> 'sent'")" \
    "digests unsent"
serve survivor
check_exactly_once 2600
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                    JOIN crier.events e ON e.id = n.event_id JOIN crier.digests g ON g.id = d.digest_id
                    WHERE (e.payload->>'n')::int > 2500 AND g.window_start <= '$before'")" \
    "events emitted during the flush are in later windows"

kill -TERM "${SERVES[@]}" 2>/dev/null || true
wait "${SERVES[@]}" 2>/dev/null || true

# 3. A window whose end passed while no worker flushed it (all were down):
# an item that comes then opens the next window, the old one is closed and
# keeps exactly the items that arrived within it. And max_items closes a
# window at once (its timer due now).
join() { sql "SELECT crier.digest_join('acme', 'z', 'webhook', 'k', 'comment.created', $1, NULL, $2)"; }
first=$(join 1 NULL)
assert_eq "$first" "$(join 1 NULL)" "an item within the window joins it"
sleep 1.2
second=$(join 1 NULL)
[ "$second" != "$first" ] || fail "an item after the window's end joined the ended window"
assert_eq "closed|2" "$(sql "SELECT state || '|' || items FROM crier.digests WHERE id = $first")" \
    "the ended window is closed with its two items"
third=$(join 600 NULL)
assert_eq "$second" "$third" "a window is joined by its key, whatever the window length given"
full1=$(sql "SELECT crier.digest_join('acme', 'z', 'webhook', 'small', 'comment.created', 600, NULL, 2)")
full2=$(sql "SELECT crier.digest_join('acme', 'z', 'webhook', 'small', 'comment.created', 600, NULL, 2)")
assert_eq "$full1" "$full2" "the second item joins"
assert_eq "closed|yes" "$(sql "SELECT g.state || '|' || CASE WHEN t.due_at <= now() THEN 'yes' ELSE 'no' END FROM crier.digests g
                            JOIN crier.timers t ON t.digest_id = g.id WHERE g.id = $full1")" \
    "max_items reached: closed and due at once"
full3=$(sql "SELECT crier.digest_join('acme', 'z', 'webhook', 'small', 'comment.created', 600, NULL, 2)")
[ "$full3" != "$full1" ] || fail "an item joined a full window"

# 4. One pass fires a digest's timer and a delay whose delivery goes into that
# digest (delay + digest, both due — a worker was late): the delayed item is
# in the digest's message, not marked digested into a digest already gathered.
item() { # ENTITY STATE TIMING: an event, its notification and a webhook delivery
    sql "WITH e AS (SELECT crier.emit('acme', 'comment.created', '$1', '{\"to\": \"race\", \"n\": 0}') AS id),
              n AS (INSERT INTO crier.notifications (key_hash, key, event_id, tenant, event_type, entity_id,
                        recipient_id)
                    SELECT md5('$1')::uuid, '$1', e.id, 'acme', 'comment.created', '$1', 'race' FROM e RETURNING id)
         INSERT INTO crier.deliveries (notification_id, tenant, channel, message_id, target, body, state, timing)
         SELECT n.id, 'acme', 'webhook', 'msg_$1', 'http://127.0.0.1:9/', '{}', '$2', '$3'::jsonb FROM n
         RETURNING id"
}
spec='{"digest": {"key": "race", "window": 600, "recipient": {"id": "race"}}}'
first=$(item race1 digested "$spec")
dg=$(sql "SELECT crier.digest_join('acme', 'race', 'webhook', 'race', 'comment.created', 600, NULL, NULL)")
sql "UPDATE crier.deliveries SET digest_id = $dg WHERE id = $first" >/dev/null
held=$(item race2 held '{"delay": 60, "digest": {"key": "race", "window": 600, "recipient": {"id": "race"}}}')
sql "INSERT INTO crier.timers (key, tenant, kind, due_at, delivery_id)
     VALUES (crier.timer_key(ARRAY['delay', '$held']), 'acme', 'delay', now() - interval '1 s', $held)" >/dev/null
sql "UPDATE crier.timers SET due_at = now() - interval '2 s' WHERE digest_id = $dg" >/dev/null
input=$(sql "SELECT input FROM crier.fire_timers(10) WHERE kind = 'digest'")
echo "$input" | /usr/bin/python3 -c '
import json, sys
items = [i["entity_id"] for i in json.loads(sys.stdin.read())["items"]]
assert items == ["race1", "race2"], items' || fail "the delayed item is missing from the digest: $input"
echo "ok"
