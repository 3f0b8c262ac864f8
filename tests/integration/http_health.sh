#!/usr/bin/env bash
# /healthz and /metrics when the database goes away and comes back: the
# test's own database refuses connections (ALTER DATABASE … ALLOW_CONNECTIONS
# false, and its sessions are terminated) while crier serve --http runs, so
# the shared cluster of the other tests is untouched. /healthz answers 503
# database_unavailable (JSON, promptly), /metrics says crier_database_up 0;
# once connections are allowed again both recover without a restart, and
# intake works again, and the engine fans out again on its new sessions (its
# prepared statements prepared anew).
. "$(dirname "$0")/../support/lib.sh"
new_db
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "note.added" { payload = { to = "array" } }
crier.rule "note.added" {
    recipients = function(event) return event.payload.to end,
    channels = { "feed" },
    feed = { title = "note {{ entity_id }}" },
}
LUA
start_api serve
KEY=$("$CRIER_BIN" keys create --tenant acme 2>/dev/null)
DB=$(sql "SELECT current_database()")
ADMIN_URL="${CRIER_DATABASE_URL% dbname=*} dbname=postgres"
admin() { psql -XAtq "$ADMIN_URL" -v ON_ERROR_STOP=1 -c "$1"; }
get() { curl -s -o "$WORK/body" -w '%{http_code}' --max-time 20 "$API$1"; }
field() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/body" "$1"; }

assert_eq 200 "$(get /healthz)" "healthy at first: $(cat "$WORK/body")"
assert_eq 1 "$(get /metrics >/dev/null; awk '$1 == "crier_database_up" { print $2 }' "$WORK/body")" "database up"

# intake ID: posts a note.added event for ann; prints the HTTP status (the body goes to $WORK/body).
intake() {
    curl -s -o "$WORK/body" -w '%{http_code}' --max-time 20 -X POST -H "Authorization: Bearer $KEY" \
        -H 'Content-Type: application/json' -d "{\"type\": \"note.added\", \"entity_id\": \"$1\", \"payload\": {\"to\": [\"ann\"]}}" \
        "$API/v1/events"
}
# post_note ID N: posts one event and waits until N feed items exist (fanned out).
post_note() {
    assert_eq 201 "$(intake "$1")" "intake of $1: $(cat "$WORK/body")"
    wait_for "SELECT count(*) = $2 FROM crier.feed_items" 30 "event $1 fanned out"
}
# Events fanned out one by one before the database goes away: the fan-out's
# connections prepare their write statement on the old sessions, and must
# prepare it again on the new ones.
for i in 1 2 3 4; do post_note "before_$i" "$i"; done

note "the database refuses connections"
admin "ALTER DATABASE $DB ALLOW_CONNECTIONS false" >/dev/null
admin "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '$DB'" >/dev/null
t0=$(date +%s%N)
assert_eq 503 "$(get /healthz)" "healthz without a database: $(cat "$WORK/body")"
took=$(( ($(date +%s%N) - t0) / 1000000 ))
note "healthz answered 503 in $took ms"
[ "$took" -lt 10000 ] || fail "healthz took $took ms to notice the database is gone"
assert_eq unavailable "$(field "d['status']")" "healthz status"
assert_eq database_unavailable "$(field "d['error']['code']")" "healthz error code"
[ -n "$(field "d['error']['message']")" ] || fail "the error has a message"
assert_eq 1 "$(get /metrics >/dev/null; awk '$1 == "crier_database_up" { print 1 - $2 }' "$WORK/body")" \
    "crier_database_up 0 while the database is gone"
assert_eq 503 "$(intake n1)" "intake without a database: $(cat "$WORK/body")"
assert_eq database_unavailable "$(field "d['error']['code']")" "intake error code"
kill -0 "$SERVE_PID" 2>/dev/null || fail "serve died without its database: $(tail -5 "$WORK/serve.log")"

note "the database is back"
admin "ALTER DATABASE $DB ALLOW_CONNECTIONS true" >/dev/null
ok=""
for _ in $(seq 100); do
    if [ "$(get /healthz)" = 200 ]; then ok=1; break; fi
    sleep 0.1
done
[ -n "$ok" ] || fail "healthz did not recover: $(cat "$WORK/body")"
assert_eq ok "$(field "d['status']")" "healthy again"
# intake works again, and the engine, reconnected, fans out
post_note n1 5
for i in 1 2 3 4; do post_note "after_$i" "$((5 + i))"; done
grep -q "prepared statement" "$WORK/serve.log" && fail "a prepared statement was missing after the reconnect: $(grep "prepared statement" "$WORK/serve.log" | head -3)"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "serve exited with an error: $(tail -5 "$WORK/serve.log")"
echo "ok"
