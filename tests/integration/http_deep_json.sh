#!/usr/bin/env bash
# Deeply nested JSON bodies (issue 10 item 8): a body nesting arrays and
# objects ~20,000 levels deep (40 KB) sent to every POST endpoint of the
# HTTP API is refused with 400 json_too_deep naming the limit — before
# PostgreSQL (crier.api_fields) or the rules (Lua) parse it — writes nothing
# and leaves no ERROR in the log; a body nested exactly to the limit (64
# levels) and everyday bodies still work, and brackets inside strings
# (escaped quotes included) do not count.
. "$(dirname "$0")/../support/lib.sh"
new_db
note_rules
start_api serve
KEY=$("$CRIER_BIN" keys create --tenant acme --name tests 2>/dev/null)
[[ $KEY == crk_* ]] || fail "crier keys create printed '$KEY'"

# post PATH BODY_FILE: prints the status; the answer is in $WORK/body.
post() {
    curl -sS --max-time 30 -o "$WORK/body" -w '%{http_code}' -X POST "$API$1" \
        -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' --data-binary @"$2"
}
json() {
    /usr/bin/python3 -c 'import json, sys; print(eval(sys.argv[2], {"d": json.load(open(sys.argv[1]))}))' \
        "$WORK/body" "$1"
}
# body FILE EXPR: writes the Python expression's value (a str) to FILE.
body() {
    /usr/bin/python3 -c 'import sys; open(sys.argv[1], "w").write(eval(sys.argv[2]))' "$1" "$2"
}
event_with_data() { # FILE DATA_JSON ENTITY
    body "$1" "'{\"type\": \"note.created\", \"entity_id\": \"$3\", \"payload\": {\"text\": \"t\", \"data\": ' + $2 + '}}'"
}

note "everyday bodies work"
event_with_data "$WORK/ok.json" "'{\"a\": [1, {\"b\": [2, [3]]}]}'" ok-1
assert_eq 201 "$(post /v1/events "$WORK/ok.json")" "an event with a nested payload ($(cat "$WORK/body"))"
wait_for "SELECT count(*) = 1 FROM crier.feed_items" 20 "ann's feed item"
ITEM=$(sql "SELECT id FROM crier.feed_items LIMIT 1")

note "nesting up to the limit is accepted, one more level is not"
# the body is one level, the payload one, data the rest
event_with_data "$WORK/at_limit.json" "'[' * 62 + ']' * 62" ok-64
assert_eq 201 "$(post /v1/events "$WORK/at_limit.json")" "a body nested 64 levels ($(cat "$WORK/body"))"
event_with_data "$WORK/over_limit.json" "'[' * 63 + ']' * 63" over-65
assert_eq 400 "$(post /v1/events "$WORK/over_limit.json")" "a body nested 65 levels"
assert_eq json_too_deep "$(json "d['error']['code']")" "the error code at 65 levels"

note "brackets inside strings do not count"
event_with_data "$WORK/strings.json" \
    "'{\"s\": \"' + '[' * 20000 + '\", \"q\": \"a \\\\\" ' + '{' * 20000 + ' \\\\\\\\\", \"e\": \"\\\\\\\\\"}'" ok-strings
assert_eq 201 "$(post /v1/events "$WORK/strings.json")" "brackets and escaped quotes in strings ($(cat "$WORK/body"))"

note "20,000 levels on every POST endpoint"
body "$WORK/deep_array.json" "'[' * 20000 + ']' * 20000"
body "$WORK/deep_object.json" "'{\"a\": ' * 20000 + '1' + '}' * 20000"
event_with_data "$WORK/deep_payload.json" "'[' * 20000 + ']' * 20000" deep-payload
body "$WORK/deep_field.json" "'{\"user\": \"ann\", \"cursor\": ' + '[' * 20000 + ']' * 20000 + '}'"
size=$(stat -c %s "$WORK/deep_array.json")
[ "$size" -eq 40000 ] || fail "the deep body is $size bytes, not 40 KB"
for path in /v1/events /v1/tokens "/v1/feed/read-all?user=ann" "/v1/feed/seen-all?user=ann" \
    "/v1/feed/items/$ITEM/read?user=ann" "/v1/feed/items/$ITEM/archive?user=ann" /v1/dead/replay; do
    for f in deep_array deep_object deep_field; do
        status=$(post "$path" "$WORK/$f.json")
        assert_eq 400 "$status" "POST $path with $f ($(head -c 300 "$WORK/body"))"
        assert_eq json_too_deep "$(json "d['error']['code']")" "POST $path with $f: the error code"
        json "d['error']['message']" | grep -q 'deeper than 64 levels' ||
            fail "POST $path with $f: the message does not name the limit: $(cat "$WORK/body")"
    done
done
assert_eq 400 "$(post /v1/events "$WORK/deep_payload.json")" "an event whose payload is 20,000 levels deep"
assert_eq json_too_deep "$(json "d['error']['code']")" "the deep payload's error code"

note "nothing was written, nothing logged as an error"
assert_eq "ok-1 ok-64 ok-strings" "$(sql "SELECT string_agg(entity_id, ' ' ORDER BY id) FROM crier.events")" \
    "only the accepted events exist"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.feed_states")" "no feed item was marked"
if grep -q ' ERROR ' "$WORK/serve.log"; then
    fail "the log has errors: $(grep 'ERROR' "$WORK/serve.log" | head -3)"
fi
note "ok"
