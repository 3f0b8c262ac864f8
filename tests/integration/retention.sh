#!/usr/bin/env bash
# Retention (crier serve's retention worker, crier.retain): under a concurrent
# workload it removes exactly the finished rows past their period — done
# events, delivered deliveries with their attempts, fired timers, sent
# digests, throttle hits — in small batches, and nothing a promise needs:
# notifications stay (a retired event re-emitted reaches nobody twice), a
# re-emit inside the horizon is still one event, a read-mode event keeps its
# row, feeds still page.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<LUA
local crier = require "crier"
crier.event_type "comment.created" { payload = { author = "string", to = "array" } }
crier.event_type "release.published" { payload = { version = "string" } }
crier.rule "comment.created" {
    recipients = function(event) return event.payload.to end,
    channels = { "feed", "webhook" },
    feed = { title = "{{ payload.author }} commented" },
    webhook = { url = "$RECEIVER_URL", body = [[{"by": "{{ payload.author }}"}]] },
}
crier.rule "release.published" { mode = "read", audience = "team:core", feed = { title = "v{{ payload.version }}" } }
LUA
emit() { # entity [recipients json]
    sql "SELECT crier.emit('acme', 'comment.created', '$1', '{\"author\": \"a\", \"to\": [\"ann\", \"bob\"]}')"
}
sql "SELECT count(crier.emit('acme', 'comment.created', 'old_' || i, '{\"author\": \"a\", \"to\": [\"ann\", \"bob\"]}'))
     FROM generate_series(1, 300) i" >/dev/null
sql "SELECT count(crier.emit('acme', 'comment.created', 'young_' || i, '{\"author\": \"a\", \"to\": [\"ann\", \"bob\"]}'))
     FROM generate_series(1, 200) i" >/dev/null
sql "SELECT crier.emit('acme', 'release.published', 'rel_1', '{\"version\": \"1\"}')" >/dev/null

"$CRIER_BIN" serve --rules "$WORK/rules" --retain-events 1h --retain-deliveries 1h --retain-timers 1h \
    --retain-digests 1h --retain-throttle-hits 1h --retention-interval 1s --retention-batch 37 \
    >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state = 'pending'" 120 "events not fanned out"
wait_for "SELECT count(*) = 1000 FROM crier.deliveries WHERE state = 'delivered'" 120 "webhooks not delivered"
old_event_id=$(sql "SELECT id FROM crier.events WHERE entity_id = 'old_1'")

note "rows of every kind, old (finished 2 h ago) and young; then a concurrent workload"
sql "INSERT INTO crier.timers (key, tenant, kind, due_at, state, fired_at)
     SELECT gen_random_uuid(), 'acme', 'delay',
            now() + CASE WHEN i <= 40 THEN interval '-3 hours' ELSE interval '1 day' END,
            CASE WHEN i <= 40 THEN 'fired' ELSE 'pending' END,
            CASE WHEN i <= 20 THEN now() - interval '2 hours' WHEN i <= 40 THEN now() END
     FROM generate_series(1, 50) i" >/dev/null  # 20 old fired, 20 young fired, 10 pending
sql "INSERT INTO crier.digests (tenant, recipient_id, channel, digest_key, event_type, window_start, window_end,
                                state, sent_at)
     SELECT 'acme', 'p' || i, 'email', 'k', 'comment.created', now() - interval '3 hours',
            now() - interval '2 hours', 'sent',
            CASE WHEN i <= 10 THEN now() - interval '2 hours' ELSE now() END
     FROM generate_series(1, 15) i;
     -- in the same transaction (a retention pass in between would delete every old digest):
     -- an old sent digest whose digested item is still there (young): the digest stays
     UPDATE crier.deliveries SET state = 'digested',
            digest_id = (SELECT min(id) FROM crier.digests WHERE sent_at < now() - interval '1 hour')
     WHERE id = (SELECT min(d.id) FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                 WHERE n.entity_id = 'young_1')" >/dev/null
sql "INSERT INTO crier.throttle_hits (key, at, delivery_id)
     SELECT gen_random_uuid(), now() - CASE WHEN i <= 30 THEN interval '2 hours' ELSE interval '0' END, i
     FROM generate_series(1, 45) i" >/dev/null  # 30 old, 15 young
for i in $(seq 40); do emit "live_$i" >/dev/null; sleep 0.02; done &
live=$!
sql "UPDATE crier.events SET processed_at = now() - interval '2 hours'
     WHERE entity_id LIKE 'old\_%' OR entity_id = 'rel_1'" >/dev/null
sql "UPDATE crier.deliveries d SET delivered_at = now() - interval '2 hours' FROM crier.notifications n
     WHERE n.id = d.notification_id AND n.entity_id LIKE 'old\_%'" >/dev/null
young_attempts=$(sql "SELECT count(*) FROM crier.delivery_attempts a JOIN crier.deliveries d ON d.id = a.delivery_id
                      JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id LIKE 'young\_%'")
wait "$live"

wait_for "SELECT count(*) = 0 FROM crier.events WHERE entity_id LIKE 'old\_%'" 60 "old events not removed"
wait_for "SELECT count(*) = 0 FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id LIKE 'old\_%'" 60 "old deliveries not removed"
wait_for "SELECT (SELECT count(*) FROM crier.timers) = 30 AND (SELECT count(*) FROM crier.digests) = 6
          AND (SELECT count(*) FROM crier.throttle_hits) = 15" 60 "old timers, digests or throttle hits not removed"
wait_for "SELECT count(*) = 0 FROM crier.events WHERE state = 'pending'" 60 "live events not fanned out"

assert_eq 240 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id ~ '^(young|live)_' AND state = 'done'")" \
    "young and live events kept"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'rel_1'")" \
    "a read-mode event keeps its row (its audience items need its dedupe key)"
assert_eq 1080 "$(sql "SELECT count(*) FROM crier.notifications")" "every notification kept"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.delivery_attempts a
                    WHERE NOT EXISTS (SELECT 1 FROM crier.deliveries d WHERE d.id = a.delivery_id)")" \
    "no attempt outlives its delivery"
assert_eq "$young_attempts" "$(sql "SELECT count(*) FROM crier.delivery_attempts a JOIN crier.deliveries d ON d.id = a.delivery_id
                      JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id LIKE 'young\_%'")" \
    "young deliveries keep their attempts"
assert_eq "20 10" "$(sql "SELECT count(*) FILTER (WHERE state = 'fired') || ' ' || count(*) FILTER (WHERE state = 'pending')
                          FROM crier.timers")" "young fired and pending timers kept"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.digests WHERE sent_at < now() - interval '1 hour'")" \
    "the old digest whose item is still there stays"

note "dedupe: a re-emit inside the horizon is one event; a retired event re-emitted reaches nobody again"
young_id=$(sql "SELECT id FROM crier.events WHERE entity_id = 'young_1'")
assert_eq "$young_id" "$(emit young_1)" "re-emit of a young event returns its id"
new_id=$(emit old_1)
[ "$new_id" != "$old_event_id" ] || fail "the retired event still answered"
wait_for "SELECT state = 'done' FROM crier.events WHERE id = $new_id" 30 "the re-emitted event not fanned out"
assert_eq 1080 "$(sql "SELECT count(*) FROM crier.notifications")" "no new notification for the re-emitted event"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.notifications WHERE event_id = $new_id")" "it reached nobody"

note "feeds still page over items whose events are gone"
total=0 before=NULL
while :; do
    page=$(sql "SELECT count(*) || ' ' || coalesce(min(id)::text, '') FROM crier.feed('acme', 'ann', $before, 100)")
    n=${page%% *}
    [ "$n" -gt 0 ] || break
    total=$((total + n))
    before=${page#* }
done
assert_eq 540 "$total" "ann's feed pages through all her items (300 old, 200 young, 40 live)"
grep -q "retention: deleted" "$WORK/serve.log" || fail "the retention worker logged nothing"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "crier serve exited with an error"

note "the worker's batches walk the ids upwards from the previous batch's last id"
# (finished as crier.retain counts it: delivered, dead, suppressed or digested)
read -r d1 d2 d3 d4 <<<"$(sql "SELECT string_agg(id::text, ' ' ORDER BY id) FROM (SELECT id FROM crier.deliveries
                              WHERE state IN ('delivered', 'dead', 'suppressed', 'digested') ORDER BY id LIMIT 4) s")"
[ -n "$d4" ] || fail "four finished deliveries expected for the cursor check"
sql "UPDATE crier.deliveries SET state = 'pending' WHERE id = $d1" >/dev/null # not finished: skipped
assert_eq "2|$d3" "$(sql "SELECT deleted || '|' || last_id FROM crier.retain('deliveries', '0', 2, 0)")" \
    "the first batch deletes the two lowest finished ids and says where it stopped"
sql "UPDATE crier.deliveries SET state = 'delivered' WHERE id = $d1" >/dev/null
assert_eq "1|$d4" "$(sql "SELECT deleted || '|' || last_id FROM crier.retain('deliveries', '0', 1, $d3)")" \
    "the next batch starts after the cursor (the row finished behind it waits for the next pass)"
assert_eq "1" "$(sql "SELECT count(*) FROM crier.deliveries WHERE id = $d1")" "the row behind the cursor is still there"
assert_eq "1|$d1" "$(sql "SELECT deleted || '|' || last_id FROM crier.retain('deliveries', '0', 1, 0)")" \
    "a new pass starts from the lowest id"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.delivery_attempts WHERE delivery_id IN ($d1, $d2, $d3, $d4)")" \
    "their attempts went with them"
assert_eq "" "$(sql "SELECT last_id FROM crier.retain('throttle_hits', '0', 5, 0)")" "throttle hits have no cursor"
echo "ok"
