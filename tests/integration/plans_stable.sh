#!/usr/bin/env bash
# The engine's hot statements keep plans that reach rows through indexes,
# whatever the statistics said when the plans were made. A daemon's
# connections live for days and keep their plans (prepared statements, the
# statements inside PL/pgSQL functions); plans made while the tables were
# empty (a new database, after a TRUNCATE) used to read events and deliveries
# by sequential scans — the fan-out write marking events done, the delivery
# results, the delivery claim — and kept doing it while the tables grew
# (docs/BENCHMARKS.md, "Plans kept for the session"). Here every session of the
# test database prints each plan (auto_explain, nested statements included)
# as a NOTICE, which `crier serve` writes to its log; the daemon starts on
# empty tables, which then grow by thousands of rows, and no plan of its
# statements may scan events or deliveries sequentially, nor read one of their
# indexes from end to end (an index scan, or a bitmap index scan, with no Index
# Cond: the delivery results' UPDATE, planned on an empty table, used to hash
# every entry of deliveries_due — the whole due backlog — for each batch).
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks

sql "DO \$\$ BEGIN
        EXECUTE format('ALTER DATABASE %I SET session_preload_libraries = ''auto_explain''', current_database());
        EXECUTE format('ALTER DATABASE %I SET auto_explain.log_min_duration = 0', current_database());
        EXECUTE format('ALTER DATABASE %I SET auto_explain.log_nested_statements = on', current_database());
        EXECUTE format('ALTER DATABASE %I SET auto_explain.log_level = notice', current_database());
     END \$\$"

ping_serve serve "$RECEIVER_URL"
# A few events on empty tables: the plans are made now.
sql "SELECT count(crier.emit('acme', 'ping', 'first-' || i)) FROM generate_series(1, 5) AS i" >/dev/null
wait_for "SELECT count(*) = 5 FROM crier.deliveries WHERE state = 'delivered'" 30 "the first pings were not delivered"
# Statistics of tiny tables, as autovacuum takes them on a new database: the
# sessions' plans are made again from these, with a few more events.
sql "ANALYZE crier.events, crier.notifications, crier.deliveries, crier.delivery_attempts"
sql "SELECT count(crier.emit('acme', 'ping', 'second-' || i)) FROM generate_series(1, 5) AS i" >/dev/null
wait_for "SELECT count(*) = 10 FROM crier.deliveries WHERE state = 'delivered'" 30 "the second pings were not delivered"
# The tables grow under the same sessions, then a few more events.
sql "SELECT count(crier.emit('acme', 'ping', 'bulk-' || i)) FROM generate_series(1, 3000) AS i" >/dev/null
wait_for "SELECT count(*) = 3010 FROM crier.deliveries WHERE state = 'delivered'" 120 "the bulk was not delivered"
sql "SELECT count(crier.emit('acme', 'ping', 'last-' || i)) FROM generate_series(1, 5) AS i" >/dev/null
wait_for "SELECT count(*) = 3015 FROM crier.deliveries WHERE state = 'delivered'" 30 "the last pings were not delivered"
stop_serve

plans=$(grep -c "Query Text:" "$WORK/serve.log" || true)
[ "$plans" -gt 100 ] || fail "the serve's log shows $plans plans: auto_explain did not print them ($(tail -3 "$WORK/serve.log"))"
note "$plans plans in the serve's log"
grep -q "crier fan-out write" "$WORK/serve.log" || fail "no plan of the fan-out write in the serve's log"
grep -q "complete_deliveries\|WITH x AS" "$WORK/serve.log" || fail "no plan of the delivery results in the serve's log"
if grep -nE "Seq Scan on (events|deliveries)\b" "$WORK/serve.log" >"$WORK/seqscans"; then
    fail "plans that scan events or deliveries sequentially ($(wc -l <"$WORK/seqscans") lines, first: $(head -1 "$WORK/seqscans")); see $WORK/serve.log"
fi
# Full index scans: an index scan node of events or deliveries none of whose
# detail lines (the deeper-indented lines right under it) is an Index Cond.
# The serve's threads print their NOTICEs (libpq's default: stderr, in pieces
# of 8 KiB) at the same time, so a long plan can be cut by another one: a
# NOTICE that starts inside a line. A node cut that way is not judged (its
# Index Cond comes after the other plan); a plan that reads an index end to
# end does so at every batch, and is printed whole many times.
awk '
    function judge() { if (scan != "" && !cond) print scan; scan = "" }
    {
        match($0, /^[ \t]*/); ind = RLENGTH
        if (scan != "" && $0 ~ /^[ \t]+NOTICE:/) scan = ""
        if (scan != "" && (ind <= scan_ind || $0 ~ /->/)) judge()
        if (scan != "" && $0 ~ /Index Cond:/) cond = 1
        if ($0 ~ /Index (Only )?Scan (Backward )?using [a-z_]+ on (events|deliveries)( |$)/ ||
            $0 ~ /Bitmap Index Scan on (events|deliveries)_[a-z_]+/) {
            scan = NR ": " $0; cond = 0; scan_ind = ind
        }
    }
    END { judge() }' "$WORK/serve.log" >"$WORK/fullscans"
if [ -s "$WORK/fullscans" ]; then
    fail "plans that read an index of events or deliveries from end to end ($(wc -l <"$WORK/fullscans") lines, first: $(head -1 "$WORK/fullscans")); see $WORK/serve.log"
fi
echo "ok"
