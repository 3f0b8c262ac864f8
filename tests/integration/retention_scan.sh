#!/usr/bin/env bash
# A retention batch reads the rows it may delete, not every row still within
# its period: crier.retain walks a kind's ids only up to crier.retain_id_limit
# (the first id created at or after the cutoff, by binary search over the
# primary key). With 100,000 events and 100,000 deliveries, 300 of each
# finished 8 days ago and the rest a day ago: a batch with nothing past its
# period touches a few dozen buffers, where walking on to the end of the
# table read all of it (a sequential scan of every row, each batch of every
# pass); the 300 go in two batches. Also: the limit on an empty table, on a
# table all past the cutoff and on one split by it; and the sweep, which finds
# a row whose finish time is earlier than its creation says.
. "$(dirname "$0")/../support/lib.sh"
new_db

# buffers SQL: shared buffers (hit + read) the statement touched, its functions' queries
# included, in a session that has run the retention functions once already (a session's
# first call reads the catalogs: some 2,000 buffers more)
buffers() {
    psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 \
        -c "SELECT (crier.retain_range('events', now() - interval '100 years', 1, 0, 2)).deleted,
                   (crier.retain_range('deliveries', now() - interval '100 years', 1, 0, 2)).deleted,
                   crier.retain_id_limit('events', now()), crier.retain_id_limit('deliveries', now())" \
        -c "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) $1" |
        python3 -c 'import json, sys; t = sys.stdin.read(); p = json.loads(t[t.index("["):])[0]["Plan"]
print(p["Shared Hit Blocks"] + p["Shared Read Blocks"])'
}

assert_eq "" "$(sql "SELECT crier.retain_id_limit('events', now())")" "the limit on an empty table"

sql "INSERT INTO crier.events (tenant, event_type, entity_id, payload, dedupe_key, state, created_at, processed_at)
     SELECT 'acme', 'memo', 'm' || g, '{}', 'k' || g, 'done',
            now() - CASE WHEN g <= 300 THEN interval '8 days' ELSE interval '1 day' END,
            now() - CASE WHEN g <= 300 THEN interval '8 days' ELSE interval '1 day' END
     FROM generate_series(1, 100000) g" >/dev/null
sql "INSERT INTO crier.deliveries (notification_id, tenant, channel, message_id, target, body, state, created_at, delivered_at)
     SELECT g, 'acme', 'webhook', 'msg_' || g, 'http://127.0.0.1:9/', '{\"n\": ' || g || '}', 'delivered',
            now() - CASE WHEN g <= 300 THEN interval '8 days' ELSE interval '1 day' END,
            now() - CASE WHEN g <= 300 THEN interval '8 days' ELSE interval '1 day' END
     FROM generate_series(1, 100000) g" >/dev/null
sql "VACUUM ANALYZE crier.events, crier.deliveries" >/dev/null

assert_eq "301" "$(sql "SELECT crier.retain_id_limit('events', now() - interval '7 days')")" "the limit: the first event inside the period"
assert_eq "301" "$(sql "SELECT crier.retain_id_limit('deliveries', now() - interval '7 days')")" "the limit: the first delivery inside the period"
assert_eq "100001" "$(sql "SELECT crier.retain_id_limit('events', now())")" "the limit when every event is older than the cutoff"
assert_eq "1" "$(sql "SELECT crier.retain_id_limit('events', now() - interval '30 days')")" "the limit when none is"
sql "SELECT crier.retain_id_limit('notifications', now())" 2>"$WORK/err.txt" && fail "an unknown kind was accepted"
grep -q "unknown kind 'notifications'" "$WORK/err.txt" || fail "unknown kind: $(cat "$WORK/err.txt")"

for kind in events deliveries; do
    # nothing past a 30-day period: the batch stops at once, where walking on to the
    # table's end read all of it
    b=$(buffers "SELECT * FROM crier.retain('$kind', interval '30 days', 200, 0)")
    [ "$b" -lt 200 ] || fail "a batch of $kind with nothing past its period touched $b buffers (the table walked to its end?)"
    # the 300 past a 7-day period: 200, then the rest after the cursor, then none
    assert_eq "200|200" "$(sql "SELECT deleted || '|' || last_id FROM crier.retain('$kind', interval '7 days', 200, 0)")" \
        "the first batch of $kind (deleted|last id)"
    assert_eq "100|300" "$(sql "SELECT deleted || '|' || last_id FROM crier.retain('$kind', interval '7 days', 200, 200)")" \
        "the second batch of $kind"
    b=$(buffers "SELECT * FROM crier.retain('$kind', interval '7 days', 200, 300)")
    [ "$b" -lt 200 ] || fail "a batch of $kind after the last one past its period touched $b buffers"
    assert_eq "0|" "$(sql "SELECT deleted || '|' || coalesce(last_id::text, '') FROM crier.retain('$kind', interval '7 days', 200, 300)")" \
        "a batch of $kind with nothing left"
done
assert_eq "99700|99700" "$(sql "SELECT (SELECT count(*) FROM crier.events) || '|' || (SELECT count(*) FROM crier.deliveries)")" \
    "rows left (those inside their period)"
assert_eq "0|0" "$(sql "SELECT (SELECT count(*) FROM crier.events WHERE processed_at < now() - interval '7 days') || '|' ||
                               (SELECT count(*) FROM crier.deliveries WHERE delivered_at < now() - interval '7 days')")" \
    "rows past their period left"

# The sweep: an event finished (by hand) 8 days ago but created now lies past the
# limit, where crier.retain does not walk; crier.retain_sweep's windows find it.
id=$(sql "INSERT INTO crier.events (tenant, event_type, entity_id, payload, dedupe_key, state, processed_at)
          VALUES ('acme', 'memo', 'late', '{}', 'late', 'done', now() - interval '8 days') RETURNING id")
assert_eq "0|" "$(sql "SELECT deleted || '|' || coalesce(last_id::text, '') FROM crier.retain('events', interval '7 days', 200, 0)")" \
    "crier.retain's walk stops before a row created now"
after=0
for _ in $(seq 1 100); do
    r=$(sql "SELECT deleted || '|' || coalesce(next_after::text, '') FROM crier.retain_sweep('events', interval '7 days', 200, $after)")
    [ "${r%%|*}" = 0 ] || break
    after=${r#*|}
    [ -n "$after" ] || fail "the sweep went through the table without finding event $id"
done
assert_eq "1" "${r%%|*}" "the sweep's window that holds event $id deletes it"
assert_eq "0" "$(sql "SELECT count(*) FROM crier.events WHERE id = $id")" "event $id after the sweep"
# The one-batch form from the start, crier.retain(kind, period, limit), walks the whole table.
sql "INSERT INTO crier.events (tenant, event_type, entity_id, payload, dedupe_key, state, processed_at)
     VALUES ('acme', 'memo', 'late2', '{}', 'late2', 'done', now() - interval '8 days')" >/dev/null
assert_eq "1" "$(sql "SELECT crier.retain('events', interval '7 days', 200)")" "crier.retain(kind, period, limit) finds a late row"
sql "SELECT crier.retain_sweep('notifications', interval '7 days', 200, 0)" 2>"$WORK/err.txt" && fail "the sweep accepted an unknown kind"
grep -q "unknown kind 'notifications'" "$WORK/err.txt" || fail "the sweep's unknown kind: $(cat "$WORK/err.txt")"
echo "ok"
