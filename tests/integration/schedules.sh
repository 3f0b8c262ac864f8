#!/usr/bin/env bash
# Recurring schedules (crier.schedule) with a 3-second cron (the seconds
# field): two daemons fire them; one is killed -9 and stays down across three
# occurrences while the other goes on; then both are down across three more
# and one comes back: the schedule with catch_up = "each" emits every missed
# occurrence once, the one with "latest" only the latest. Every occurrence of
# "each" from the first to the last is one event (no gap, no duplicate), each
# reaching the webhook as one message. crier check lists the schedules (and refuses a
# bad cron or zone with file:line); crier status lists them with their next
# occurrence; a rules reload that drops a schedule stops it.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "tick" { payload = { schedule = "string", occurrence = "string", n = "integer" } }
crier.rule "tick" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = { url = crier.setting("url") },
}
crier.schedule "every-3s" { cron = "*/3 * * * * *", tenants = { "acme" }, event = "tick", payload = { n = 1 } }
crier.schedule "latest-3s" {
    cron = "*/3 * * * * *", time_zone = "Europe/Berlin", tenants = { "acme", "globex" }, event = "tick",
    entity = "latest", payload = { n = 2 }, catch_up = "latest",
}
LUA
"$CRIER_BIN" check "$WORK/rules" --set url=http://127.0.0.1:9/ >"$WORK/check.out"
grep -q '^schedule every-3s (.*rules.lua:8): "\*/3 \* \* \* \* \*" in UTC for acme -> tick, catch_up each; next: 20' \
    "$WORK/check.out" || fail "crier check lists the schedule: $(cat "$WORK/check.out")"
grep -q '^schedule latest-3s .* in Europe/Berlin for acme, globex -> tick, catch_up latest' "$WORK/check.out" ||
    fail "crier check lists the second schedule: $(cat "$WORK/check.out")"

# a bad cron is refused with file:line, and so is an unknown zone
mkdir -p "$WORK/bad"
sed -e 's|"\*/3 \* \* \* \* \*", tenants = { "acme" }|"*/3 * * * 8", tenants = { "acme" }|' \
    -e 's|Europe/Berlin|Europe/Berlim|' "$WORK/rules/rules.lua" >"$WORK/bad/rules.lua"
if "$CRIER_BIN" check "$WORK/bad" --set url=http://127.0.0.1:9/ >"$WORK/bad.out" 2>&1; then
    fail "bad schedules were accepted"
fi
grep -q "rules.lua:8: schedule 'every-3s': cron \"\*/3 \* \* \* 8\": day of week: 8 is out of range 0-7" "$WORK/bad.out" ||
    fail "the bad cron's message: $(cat "$WORK/bad.out")"
grep -q "rules.lua:9: schedule 'latest-3s': unknown time zone \"Europe/Berlim\"" "$WORK/bad.out" ||
    fail "the unknown zone's message: $(cat "$WORK/bad.out")"

serve() { # NAME
    # a 2-s lease: a daemon killed -9 with sends in flight gives them back
    # within the waits below (the default 60 s would outlast them)
    "$CRIER_BIN" serve --rules "$WORK/rules" --poll 0.2 --lease 2 --set "url=$RECEIVER_URL" >"$WORK/$1.log" 2>&1 &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
}
# n: the number of occurrences of a schedule (and tenant) emitted so far
emitted() { sql "SELECT count(*) FROM crier.events WHERE dedupe_key LIKE 'schedule:$1:%' AND tenant = '${2:-acme}'"; }
wait_emitted() { # SCHEDULE COUNT TIMEOUT
    wait_for "SELECT count(*) >= $2 FROM crier.events WHERE dedupe_key LIKE 'schedule:$1:%' AND tenant = 'acme'" "$3" \
        "$1: fewer than $2 occurrences emitted"
}

serve d1
D1=$SERVE_PID
serve d2
D2=$SERVE_PID
wait_for "SELECT count(*) = 3 FROM crier.schedules" 10 "the schedules were not registered"
assert_eq "every-3s|acme|*/3 * * * * *|UTC|each latest-3s|acme|*/3 * * * * *|Europe/Berlin|latest latest-3s|globex|*/3 * * * * *|Europe/Berlin|latest" \
    "$(sql "SELECT string_agg(concat_ws('|', name, tenant, cron, time_zone, catch_up), ' ' ORDER BY name, tenant)
            FROM crier.schedules")" "one row per schedule and tenant"
wait_emitted every-3s 2 15
# d1 dies; d2 alone across three occurrences
kill -9 "$D1"
wait "$D1" 2>/dev/null || true
n=$(emitted every-3s)
wait_emitted every-3s $((n + 3)) 15
serve d1
D1=$SERVE_PID
n=$(emitted every-3s)
wait_emitted every-3s $((n + 1)) 10
# both down across three occurrences; one comes back
kill -9 "$D1" "$D2"
wait "$D1" "$D2" 2>/dev/null || true
down_at=$(sql "SELECT now()")
before_each=$(emitted every-3s)
before_latest=$(emitted latest-3s)
sleep 10
assert_eq "$before_each" "$(emitted every-3s)" "nothing emitted while every daemon is down"
serve d3
D3=$SERVE_PID
wait_emitted every-3s $((before_each + 3)) 10
sleep 1
caught_each=$(($(emitted every-3s) - before_each))
caught_latest=$(($(emitted latest-3s) - before_latest))
note "after 10 s down: every-3s caught up $caught_each occurrences, latest-3s $caught_latest"
[ "$caught_each" -ge 3 ] || fail "catch_up each: $caught_each occurrences after 10 s down"
# latest: one event for the occurrences missed, then the regular ones
missed_latest=$(sql "SELECT count(*) FROM crier.events WHERE dedupe_key LIKE 'schedule:latest-3s:%' AND tenant = 'acme'
                     AND (payload->>'occurrence')::timestamptz BETWEEN '$down_at'::timestamptz + interval '3 s'
                                                                    AND '$down_at'::timestamptz + interval '9 s'")
[ "$missed_latest" -le 1 ] || fail "catch_up latest emitted $missed_latest of the occurrences missed while down"
sleep 2
kill -TERM "$D3"
wait "$D3" 2>/dev/null || true

# every occurrence of every-3s from the first to the last: once, 3 s apart, no gap
assert_eq "0|1" "$(sql "WITH o AS (SELECT (payload->>'occurrence')::timestamptz AS at FROM crier.events
                                   WHERE dedupe_key LIKE 'schedule:every-3s:%')
                        SELECT (extract(epoch FROM max(at) - min(at)) / 3 + 1 - count(*))::int || '|' ||
                               count(DISTINCT extract(epoch FROM at)::int % 3 = 0)
                        FROM o")" "every-3s: every occurrence from the first to the last, once"
# the latest-3s schedule skipped the occurrences missed while down (but the latest)
gap=$(sql "WITH o AS (SELECT (payload->>'occurrence')::timestamptz AS at FROM crier.events
                      WHERE dedupe_key LIKE 'schedule:latest-3s:%' AND tenant = 'acme')
           SELECT max(d) FROM (SELECT extract(epoch FROM at - lag(at) OVER (ORDER BY at))::int AS d FROM o) x")
[ "$gap" -ge 9 ] || fail "catch_up latest: the largest gap between its events is ${gap}s (expected >= 9 s)"
# (up to the last occurrence both tenants reached: a daemon stopped between
# the two tenants' rows of one occurrence has fired it for one of them only)
assert_eq "" "$(sql "WITH o AS (SELECT tenant, (payload->>'occurrence')::timestamptz AS at FROM crier.events
                                WHERE dedupe_key LIKE 'schedule:latest-3s:%'),
                          upto AS (SELECT min(m) AS m FROM (SELECT max(at) AS m FROM o GROUP BY tenant) x)
                     (SELECT at FROM o, upto WHERE tenant = 'acme' AND at <= upto.m
                      EXCEPT SELECT at FROM o, upto WHERE tenant = 'globex' AND at <= upto.m)
                     UNION ALL
                     (SELECT at FROM o, upto WHERE tenant = 'globex' AND at <= upto.m
                      EXCEPT SELECT at FROM o, upto WHERE tenant = 'acme' AND at <= upto.m)")" \
    "each tenant of a schedule gets the same occurrences"
assert_eq t "$(sql "SELECT bool_and(payload->>'schedule' = split_part(dedupe_key, ':', 2) AND
                               dedupe_key = 'schedule:' || (payload->>'schedule') || ':' || (payload->>'occurrence'))
                    FROM crier.events")" "the payload names the schedule and the occurrence; the key derives from them"
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state <> 'done'" 10 "events not processed"
events=$(sql "SELECT count(*) FROM crier.events")
mark=$(sql "SELECT max(id) FROM crier.events")
serve d4
# (d4 keeps firing every 3 s: wait for the events there were, not for a
# moment with nothing pending)
wait_for "SELECT count(*) = $events FROM crier.events e WHERE e.id <= $mark AND EXISTS
          (SELECT FROM crier.notifications n JOIN crier.deliveries d ON d.notification_id = n.id
           WHERE n.event_id = e.id AND d.state = 'delivered')" 30 "deliveries not sent"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
total=$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'")
[ "$total" -ge "$events" ] || fail "every event delivered: $total deliveries for $events events"
# (a send in flight when its daemon was killed -9 is sent again with its
# webhook-id: delivery is at least once, deduplicated by that id)
receiver_ids >"$WORK/ids"
assert_eq "$total" "$(sort -u "$WORK/ids" | wc -l)" "one webhook message per event delivered"
assert_eq t "$(sql "SELECT bool_and(last_error IS NULL AND next_occurrence > last_occurrence) FROM crier.schedules")" \
    "the rows moved on"

"$CRIER_BIN" status >"$WORK/status.out"
grep -q '^schedules: 3$' "$WORK/status.out" || fail "crier status counts the schedules: $(cat "$WORK/status.out")"
grep -q '^schedule every-3s (tenant acme): "\*/3 \* \* \* \* \*" in UTC, catch_up each; next 20.*; last fired 20.* for the occurrence 20' \
    "$WORK/status.out" || fail "crier status lists a schedule with its next occurrence: $(cat "$WORK/status.out")"

# a reload that drops a schedule stops it; its row stays
sed -i '/crier.schedule "latest-3s"/,$d' "$WORK/rules/rules.lua"
"$CRIER_BIN" check "$WORK/rules" --set url=http://127.0.0.1:9/ >/dev/null || fail "the trimmed rules do not load"
last_id=$(sql "SELECT max(id) FROM crier.events")
serve d5
sleep 7
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE dedupe_key LIKE 'schedule:latest-3s:%' AND id > $last_id")" \
    "a removed schedule emits nothing more"
assert_eq 2 "$(sql "SELECT count(*) FROM crier.schedules WHERE name = 'latest-3s'")" "its rows stay"
[ "$(sql "SELECT count(*) FROM crier.events WHERE dedupe_key LIKE 'schedule:every-3s:%' AND id > $last_id")" -ge 2 ] ||
    fail "the remaining schedule goes on"
echo "ok ($total events)"
