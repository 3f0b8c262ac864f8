#!/usr/bin/env bash
# A rule's crier.query never stalls crier serve's main loop (issue 12 item 5):
# the fast lane defers a rule that queries to the slow lane's thread, so a
# query that takes 1.5 s per event (pg_sleep in the query) does not hold up
# the events of other types emitted right after it, which are fanned out
# within a second, while the querying events still end done with the rows
# their query returned (the rule swallows the deferred query's error: the
# plan made from it is thrown away all the same). A query's session change
# (set_config) does not outlive its statement.
. "$(dirname "$0")/../support/lib.sh"
new_db
sql "CREATE SCHEMA app; CREATE TABLE app.owners (account text, user_id text);
     INSERT INTO app.owners VALUES ('a1', 'ann'), ('a2', 'bob'), ('a3', 'cid');
     GRANT USAGE ON SCHEMA app TO crier_rules; GRANT SELECT ON app.owners TO crier_rules" >/dev/null
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "lookup" { payload = { account = "string" } }
crier.event_type "plain" { payload = {} }
local owner = crier.query("owner", [[
    SELECT user_id AS id FROM app.owners, pg_sleep(1.5) WHERE account = $1]])
crier.rule "lookup" {
    recipients = function(event)
        -- a rule that swallows a failing query: deferred, its plan is discarded anyway
        local ok, rows = pcall(function() return owner(event.payload.account) end)
        if not ok or not rows then return { "fallback" } end
        return rows
    end,
    channels = { "feed" },
    feed = { title = "lookup {{ entity_id }}" },
}
crier.rule "plain" { recipients = { "ops" }, channels = { "feed" }, feed = { title = "plain" } }
-- a query's session change does not outlive it (each runs in a transaction rolled back)
crier.event_type "setter" { payload = {} }
local set = crier.query("set", [[SELECT set_config('application_name', 'changed_by_a_rule', false) AS id]])
local get = crier.query("get", [[SELECT current_setting('application_name') AS id]])
crier.rule "setter" {
    recipients = function() set() return get() end,
    channels = { "feed" }, feed = { title = "setter" },
}
LUA
# a stored setting makes the fan-out list every event's recipients before its
# plan (to load their settings): a querying recipients function is deferred
# there too, and its list forgotten
sql "SELECT crier.set_recipient_settings('acme', 'zed', '{\"locale\": \"de\"}')" >/dev/null
"$CRIER_BIN" serve --rules "$WORK/rules" --poll 0.2 --batch-size 10 >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
sleep 1
sql "SELECT crier.emit('acme', 'lookup', 'L' || i, jsonb_build_object('account', 'a' || i)) FROM generate_series(1, 3) i" >/dev/null
sleep 0.2
sql "SELECT count(crier.emit('acme', 'plain', 'P' || i)) FROM generate_series(1, 30) i" >/dev/null
wait_for "SELECT count(*) = 30 FROM crier.events WHERE event_type = 'plain' AND state = 'done'" 30 "the plain events"
slowest=$(sql "SELECT round(1000 * extract(epoch FROM max(processed_at - created_at))) FROM crier.events WHERE event_type = 'plain'")
lookups_done=$(sql "SELECT max(processed_at) FROM crier.events WHERE event_type = 'lookup'")
note "plain events fanned out within $slowest ms of their commit"
[ "$slowest" -lt 1000 ] || fail "the plain events waited $slowest ms behind the lookups' queries: $(grep -i 'slow lane' "$WORK/serve.log" | head -3)"
wait_for "SELECT count(*) = 3 FROM crier.events WHERE event_type = 'lookup' AND state = 'done'" 30 "the lookups, in the slow lane"
assert_eq "L1:ann L2:bob L3:cid" \
    "$(sql "SELECT string_agg(entity_id || ':' || recipient_id, ' ' ORDER BY entity_id) FROM crier.notifications WHERE event_type = 'lookup'")" \
    "each lookup went to the owner its query found (the deferred attempt's fallback was discarded)"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.events WHERE event_type = 'lookup' AND lane = 1")" "the lookups ran in the slow lane"
sql "SELECT crier.emit('acme', 'setter', 's1')" >/dev/null
wait_for "SELECT count(*) = 1 FROM crier.notifications WHERE event_type = 'setter'" 20 "the setter event"
assert_eq "crier rules" "$(sql "SELECT recipient_id FROM crier.notifications WHERE event_type = 'setter'")" \
    "a query's set_config was rolled back with its transaction"
grep -q "queries the database (crier.query): it goes to the slow lane" "$WORK/serve.log" ||
    fail "the log says why the events moved: $(grep -i lane "$WORK/serve.log" | head -3)"
stop_serve
echo "ok"
