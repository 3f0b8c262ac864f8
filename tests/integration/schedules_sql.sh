#!/usr/bin/env bash
# crier.fire_schedules and crier.schedules_next called directly, with the
# rows moved into the past to stand for down time: a schedule seen for the
# first time starts from now; missed occurrences are emitted each (once, even
# when fired again) or only the latest; a changed cron takes effect from the
# last occurrence handled, and a daemon on the other definition waits for its
# own next occurrence (no ping-pong); a schedule with an unknown zone fails
# alone (recorded, retried after 30 s) while the others go on.
. "$(dirname "$0")/../support/lib.sh"
new_db
def() { # NAME CRON ZONE CATCH_UP
    printf '{"name":"%s","cron":"%s","time_zone":"%s","tenants":["acme"],"event_type":"tick","entity":"%s","payload":{"k":1},"catch_up":"%s"}' \
        "$1" "$2" "$3" "$1" "$4"
}
fire() { sql "SELECT string_agg(name || '=' || outcome || '/' || emitted || '/' || skipped, ' ' ORDER BY name)
              FROM crier.fire_schedules('[$1]'::jsonb)"; }
count() { sql "SELECT count(*) FROM crier.events WHERE dedupe_key LIKE 'schedule:$1:%'"; }
# A 10-s grid: fire_schedules reads the clock (clock_timestamp), and on a 2-s
# grid two calls a few tens of ms apart crossed an occurrence often enough to
# fail a clean-clone run now and then.
EACH=$(def each '*/10 * * * * *' UTC each)
LATEST=$(def latest '*/10 * * * * *' Europe/Berlin latest)
# And the first steps start 0.3 s past an occurrence of that grid: a run that
# registered at :09.9 and looked again at :10.1 saw one due (a clean-clone
# run failed so). The steps up to the next one take well under 9 s.
sleep "$(awk -v t="$(date +%s.%N)" 'BEGIN { w = 10.3 - (t - 10 * int(t / 10)); if (w >= 10) w -= 10; printf "%.3f", w }')"

assert_eq "each=registered/0/0 latest=registered/0/0" "$(fire "$EACH,$LATEST")" "first sight: registered"
assert_eq t "$(sql "SELECT bool_and(next_occurrence > created_at AND last_occurrence IS NULL) FROM crier.schedules")" \
    "a new schedule starts from now"
assert_eq "" "$(fire "$EACH,$LATEST")" "nothing due yet"
assert_eq t "$(sql "SELECT crier.schedules_next('[$EACH,$LATEST]') = (SELECT min(next_occurrence) FROM crier.schedules)")" \
    "the next wake-up is the next occurrence (compared with the rows: under load it may already be past)"

# 100 s of down time: 10 occurrences missed
# (on the */10 grid)
sql "WITH g AS (SELECT date_trunc('second', now()) - interval '100 s'
                       - interval '1 s' * (extract(epoch FROM date_trunc('second', now()))::int % 10) AS at)
     UPDATE crier.schedules SET last_occurrence = g.at - interval '10 s', next_occurrence = g.at FROM g" >/dev/null
assert_eq t "$(sql "SELECT crier.schedules_next('[$EACH,$LATEST]') <= now()")" "due now"
out=$(fire "$EACH,$LATEST")
grep -qE '^each=fired/1[0-3]/0 latest=fired/1/(9|1[0-2])$' <<<"$out" || fail "catch-up each / latest: $out"
each_n=$(count each)
assert_eq 1 "$(count latest)" "latest: only the latest missed occurrence"
assert_eq t "$(sql "SELECT bool_and(e.payload = jsonb_build_object('k', 1, 'schedule', 'each', 'occurrence', e.payload->>'occurrence')
                               AND e.entity_id = 'each:' || (e.payload->>'occurrence') AND e.state = 'pending')
                    FROM crier.events e WHERE e.dedupe_key LIKE 'schedule:each:%'")" "the events' payload and entity"
# the same occurrences again (as a second daemon would): nothing new for them
last=$(sql "SELECT last_occurrence FROM crier.schedules WHERE name = 'each'")
sql "UPDATE crier.schedules SET last_occurrence = last_occurrence - interval '20 s',
                                next_occurrence = next_occurrence - interval '20 s' WHERE name = 'each'" >/dev/null
fire "$EACH" >/dev/null
assert_eq "$each_n" "$(sql "SELECT count(*) FROM crier.events WHERE dedupe_key LIKE 'schedule:each:%'
                            AND (payload->>'occurrence')::timestamptz <= '$last'")" "an occurrence fired twice is one event"

# a changed cron: from the last occurrence handled
CHANGED=$(def each '*/20 * * * * *' UTC each)
sql "UPDATE crier.schedules SET last_occurrence = now() - interval '70 s', next_occurrence = now() + interval '1 h'
     WHERE name = 'each'" >/dev/null
out=$(fire "$CHANGED")
grep -qE '^each=fired/[34]/0$' <<<"$out" || fail "a changed cron fires its occurrences since the last one: $out"
assert_eq "*/20 * * * * *" "$(sql "SELECT cron FROM crier.schedules WHERE name = 'each'")" "the row takes the new cron"
# daemons on the old and the new definition alternate: each fires its own
# occurrences since the last one handled, once, then neither is due again
# until its own next occurrence (no ping-pong)
out=$(sql "SELECT concat_ws(' ', (SELECT coalesce(sum(emitted), 0) FROM crier.fire_schedules('[$EACH]')),
                                 (SELECT coalesce(sum(emitted), 0) FROM crier.fire_schedules('[$CHANGED]')),
                                 (SELECT coalesce(sum(emitted), 0) FROM crier.fire_schedules('[$EACH]')),
                                 (SELECT coalesce(sum(emitted), 0) FROM crier.fire_schedules('[$CHANGED]')))
            || '|' || now()")
fired_at=${out#*|}
out=${out%%|*}
grep -qE '^[0-9]+ [0-9]+ 0 0$' <<<"$out" || fail "alternating definitions: emitted $out (the second round must emit nothing)"
# compared with the time the rounds ran, not a later now(): a loaded run can
# reach the next occurrence before this query
assert_eq "t t" "$(sql "SELECT crier.schedules_next('[$EACH]') > '$fired_at'::timestamptz,
                              crier.schedules_next('[$CHANGED]') > '$fired_at'::timestamptz" | tr '|' ' ')" \
    "then each waits for its own next occurrence"
# an unknown zone fails alone
BAD=$(def bad '0 8 * * *' Mars/Olympus_Mons each)
GOOD=$(def good '0 8 * * *' Asia/Tokyo each)
out=$(fire "$BAD,$GOOD")
grep -q "^bad=failed: .*time zone \"Mars/Olympus_Mons\" not recognized/0/0 good=registered/0/0$" <<<"$out" ||
    fail "an unknown zone: $out"
assert_eq "t|t" "$(sql "SELECT last_error LIKE '%Mars/Olympus_Mons%', retry_after > now() FROM crier.schedules WHERE name = 'bad'")" \
    "its error is recorded, retried later"
assert_eq t "$(sql "SELECT crier.schedules_next('[$BAD]') IS NULL")" "it holds no wake-up"
assert_eq t "$(sql "SELECT crier.schedules_next('[$GOOD]') = crier.cron_next('0 8 * * *', 'Asia/Tokyo', now())")" \
    "the good one's next occurrence: 08:00 in Tokyo"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE dedupe_key LIKE 'schedule:bad:%'")" "nothing emitted for it"
echo "ok"
