#!/usr/bin/env bash
# Scheduled sends through HTTP and the CLI: POST /v1/events with not_before
# and `crier emit --not-before` (RFC 3339 with its offset, or "+4s" in the
# CLI) store a scheduled event that reaches its recipient's feed at its time,
# not before, once; GET /v1/events/{id} shows it scheduled with its time; a
# bad time is refused with a message saying what to give, and stores nothing.
. "$(dirname "$0")/../support/lib.sh"
new_db
note_rules
start_api w1
KEY=$("$CRIER_BIN" keys create --tenant acme --name tests 2>/dev/null)
post() { # PATH JSON: prints the status; the body is in $WORK/body
    curl -sS --max-time 30 -o "$WORK/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $KEY" \
        -H 'Content-Type: application/json' --data-binary "$2" "$API$1"
}
field() { /usr/bin/python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))[sys.argv[2]]; print(v if v is not None else "")' "$WORK/body" "$1"; }

due=$(date -u -d '+10 seconds' +%Y-%m-%dT%H:%M:%SZ)
due_offset=$(TZ=Asia/Kolkata date -d "$due" +%Y-%m-%dT%H:%M:%S+05:30)
assert_eq 201 "$(post /v1/events "{\"type\":\"note.created\",\"entity_id\":\"h1\",\"payload\":{\"text\":\"http\"},\"not_before\":\"$due_offset\"}")" \
    "a scheduled event over HTTP: $(cat "$WORK/body")"
http_id=$(field id)
assert_eq scheduled "$(field state)" "the answer says scheduled"
assert_eq t "$(sql "SELECT not_before = '$due' FROM crier.events WHERE id = $http_id")" "the offset is honoured"
curl -sS -o "$WORK/body" -H "Authorization: Bearer $KEY" "$API/v1/events/$http_id"
assert_eq scheduled "$(field state)" "GET /v1/events/{id}: scheduled"
[ -n "$(field not_before)" ] || fail "GET /v1/events/{id} shows not_before: $(cat "$WORK/body")"

for bad in '"tomorrow"' '"2026-03-01T08:00:00"' '"2026-02-30T08:00:00Z"' '12' '"now"'; do
    assert_eq 400 "$(post /v1/events "{\"type\":\"note.created\",\"entity_id\":\"bad\",\"payload\":{\"text\":\"x\"},\"not_before\":$bad}")" \
        "not_before $bad refused"
    grep -q "not_before" "$WORK/body" || fail "the error names the field: $(cat "$WORK/body")"
done
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'bad'")" "a bad time stores nothing"

cli_id=$("$CRIER_BIN" emit --rules "$WORK/rules" --tenant acme --type note.created --entity c1 \
    --payload '{"text": "cli"}' --not-before +10s)
cli_due=$(sql "SELECT not_before FROM crier.events WHERE id = $cli_id")
assert_eq t "$(sql "SELECT state = 'scheduled' AND not_before BETWEEN now() + interval '5 s' AND now() + interval '11 s'
                    FROM crier.events WHERE id = $cli_id")" "crier emit --not-before +10s"
cli_abs=$("$CRIER_BIN" emit --rules "$WORK/rules" --tenant acme --type note.created --entity c2 \
    --payload '{"text": "cli"}' --not-before "$due")
assert_eq t "$(sql "SELECT state = 'scheduled' AND not_before = '$due' FROM crier.events WHERE id = $cli_abs")" \
    "crier emit --not-before RFC 3339"
set +e
"$CRIER_BIN" emit --rules "$WORK/rules" --tenant acme --type note.created --entity bad --payload '{"text": "x"}' \
    --not-before "next tuesday" 2>"$WORK/cli.err"
rc=$?
set -e
assert_eq 2 "$rc" "crier emit with a bad time exits 2"
grep -q "not-before 'next tuesday' is not a time: give RFC 3339" "$WORK/cli.err" || fail "unclear: $(cat "$WORK/cli.err")"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'bad'")" "still nothing stored"

while [ "$(sql "SELECT now() < min(not_before) - interval '100 ms' FROM crier.events")" = t ]; do
    assert_eq 0 "$(sql "SELECT count(*) FROM crier.feed_items")" "nothing in the feed before the time"
    sleep 0.1
done
wait_for "SELECT count(*) = 3 FROM crier.feed_items" 20 "the scheduled events did not reach the feed"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.feed_items f JOIN crier.notifications n ON n.id = f.notification_id
                    JOIN crier.events e ON e.id = n.event_id WHERE f.created_at < e.not_before")" "not before the time"
sleep 1
assert_eq "3 done" "$(sql "SELECT count(*) || ' ' || string_agg(DISTINCT state, ',') FROM crier.events")" "once each"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.feed_items")" "one feed item each"
echo "ok"
