#!/usr/bin/env bash
# The HTTP API of crier serve, over real HTTP against a real `crier serve
# --http`: intake (dedupe, Idempotency-Key replay and conflict, validation by
# the rules, every kind of bad input refused with a JSON error and nothing
# written), the feed (keyset pages stable while items arrive, signed cursors,
# counts, mark one, exact mark-all-read through the API), user tokens (CLI
# and API, expired, forged, another user's), API keys (revoked), a
# notification's status with its attempts, dead letters listed and replayed,
# /metrics, /healthz (200, then 503 while an event cannot be fanned out),
# CORS, a lost database connection, a rules reload, and a graceful stop.
. "$(dirname "$0")/../support/lib.sh"
new_db

start_receiver hooks --statuses 500,204
HOOK_URL=$RECEIVER_URL
HOOK_LOG=$RECEIVER_LOG
start_receiver dead --statuses 400,400,400,204 --body 'refused'
DEAD_URL=$RECEIVER_URL

mkdir -p "$WORK/rules"
write_rules() { # extra Lua appended to the base rules; deployed by rename
    cat >"$WORK/rules/.rules.tmp" <<LUA
local crier = require "crier"
crier.event_type "comment.created" { payload = { author = "string", text = "string", to = "array" } }
crier.rule "comment.created" {
    recipients = function(event) return event.payload.to end,
    channels = { "feed" },
    feed = { title = "{{ payload.author }} commented", body = "{{ payload.text }}" },
}
crier.event_type "invoice.created" { payload = { invoice_id = "string", amount_cents = "integer" } }
crier.rule "invoice.created" {
    recipients = { "billing" },
    channels = { "webhook" },
    webhook = {
        url = crier.setting("hook_url"),
        body = function(event) return { invoice_id = event.payload.invoice_id } end,
        retry = { 0, "1s", "1s" },
    },
}
crier.event_type "alert.raised" { payload = { n = "integer?" } }
crier.rule "alert.raised" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = {
        url = crier.setting("dead_url"),
        body = function(event) return { entity = event.entity_id } end,
        retry = { 0 },
    },
}
$1
LUA
    mv "$WORK/rules/.rules.tmp" "$WORK/rules/rules.lua"
}
write_rules ""

# start_api_hooks NAME [serve args…]: start_api with the receivers' URLs set.
start_api_hooks() {
    local name=$1
    shift
    start_api "$name" --set "hook_url=$HOOK_URL" --set "dead_url=$DEAD_URL" "$@"
}

# call METHOD PATH [curl args…]: prints the status; the body is in $WORK/body,
# the headers in $WORK/headers.
call() {
    local method=$1 path=$2
    shift 2
    curl -sS --max-time 30 -o "$WORK/body" -D "$WORK/headers" -w '%{http_code}' -X "$method" "$@" "$API$path"
}
# as CREDENTIAL METHOD PATH [curl args…]
as() {
    local cred=$1
    shift
    local method=$1 path=$2
    shift 2
    call "$method" "$path" -H "Authorization: Bearer $cred" "$@"
}
# post CREDENTIAL PATH JSON [curl args…]
post() {
    local cred=$1 path=$2 body=$3
    shift 3
    as "$cred" POST "$path" -H 'Content-Type: application/json' --data-binary "$body" "$@"
}
# json EXPR: evaluates a Python expression over the last body (d); strings
# print as they are, anything else as JSON.
json() {
    /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v))' "$WORK/body" "$1"
}
header() { # NAME: a header of the last response
    grep -i "^$1:" "$WORK/headers" | head -1 | cut -d' ' -f2- | tr -d '\r'
}
expect_error() { # STATUS CODE MESSAGE STATUS_GOT
    assert_eq "$1" "$4" "$3 (status; body $(cat "$WORK/body"))"
    assert_eq "$2" "$(json "d['error']['code']")" "$3 (error code)"
    [ -n "$(json "d['error']['message']")" ] || fail "$3: the error has no message"
}
# raw REQUEST: sends bytes over a plain socket (for what curl refuses to send);
# prints the status line's code; the body goes to $WORK/body.
raw() {
    /usr/bin/python3 - "${API#http://}" "$1" "$WORK/body" <<'PY'
import socket, sys
host, port = sys.argv[1].split(":")
s = socket.create_connection((host, int(port)))
s.sendall(sys.argv[2].encode("latin-1").decode("unicode_escape").encode("latin-1"))
s.settimeout(5)
data = b""
try:
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
            ([l.split(b":")[1] for l in data.split(b"\r\n") if l.lower().startswith(b"content-length:")] or [b"0"])[0]):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except socket.timeout:
    pass
open(sys.argv[3], "wb").write(data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b"")
print(data.split(b" ")[1].decode() if data else "000")
PY
}

start_api_hooks serve --cors-origin https://app.example --http-max-body 65536 --healthz-max-lag 5s
KEY=$("$CRIER_BIN" keys create --tenant acme --name tests 2>"$WORK/keys.err")
[[ $KEY == crk_* ]] || fail "crier keys create printed '$KEY'"
grep -q "shown only now" "$WORK/keys.err" || fail "keys create says the key is shown once"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.api_keys WHERE key_hash = sha256('$KEY'::bytea)")" "only the digest is stored"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.api_keys WHERE hint = '$KEY' OR encode(key_hash, 'escape') LIKE '%$KEY%'")" \
    "the key itself is not stored"

note "health"
assert_eq 200 "$(call GET /healthz)" "healthz"
assert_eq ok "$(json "d['status']")" "healthz status"

note "intake"
COMMENT='{"type": "comment.created", "entity_id": "c1", "payload": {"author": "cy", "text": "<b>hi</b>", "to": ["ann", "bob"]}}'
assert_eq 201 "$(post "$KEY" /v1/events "$COMMENT")" "a new event"
EVENT1=$(json "d['id']")
assert_eq false "$(json "d['duplicate']")" "not a duplicate"
assert_eq 200 "$(post "$KEY" /v1/events "$COMMENT")" "the same event again (crier.emit's dedupe)"
assert_eq "$EVENT1" "$(json "d['id']")" "the duplicate has the first event's id"
assert_eq true "$(json "d['duplicate']")" "marked as a duplicate"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'c1'")" "one event"

IDEM='{"type": "comment.created", "entity_id": "c2", "payload": {"author": "cy", "text": "two", "to": ["ann"]}}'
assert_eq 201 "$(post "$KEY" /v1/events "$IDEM" -H 'Idempotency-Key: req-2')" "with an Idempotency-Key"
cp "$WORK/body" "$WORK/first.json"
[ -z "$(header Idempotent-Replayed)" ] || fail "the first request is not a replay"
assert_eq 200 "$(post "$KEY" /v1/events "$IDEM" -H 'Idempotency-Key: req-2')" "the same key and body again"
assert_eq true "$(header Idempotent-Replayed)" "the replay says so"
cmp -s "$WORK/first.json" "$WORK/body" || fail "the replay returns the first response: $(cat "$WORK/body")"
# the same JSON with other spacing and key order is the same request
assert_eq 200 "$(post "$KEY" /v1/events '{"payload":{"to":["ann"],"text":"two","author":"cy"},"entity_id":"c2","type":"comment.created"}' \
    -H 'Idempotency-Key: req-2')" "an equivalent body is a replay"
expect_error 409 idempotency_key_reused "the same key with another body" \
    "$(post "$KEY" /v1/events '{"type": "comment.created", "entity_id": "c3", "payload": {"author": "x", "text": "y", "to": ["ann"]}}' \
        -H 'Idempotency-Key: req-2')"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'c3'")" "the conflicting request wrote nothing"
# eight clients send the same request with the same key at once: one event,
# one 201, the others replays of it
RACE='{"type": "comment.created", "entity_id": "race", "payload": {"author": "r", "text": "r", "to": ["rob"]}}'
racers=()
for i in 1 2 3 4 5 6 7 8; do
    curl -sS -o "$WORK/race.$i" -w '%{http_code}\n' -X POST -H "Authorization: Bearer $KEY" \
        -H 'Content-Type: application/json' -H 'Idempotency-Key: race-key' --data-binary "$RACE" "$API/v1/events" \
        >"$WORK/race.$i.status" &
    racers+=($!)
done
wait "${racers[@]}"
assert_eq "1 7" "$(echo "$(cat "$WORK"/race.*.status | grep -c 201) $(cat "$WORK"/race.*.status | grep -c 200)")" \
    "one created, seven replayed"
assert_eq 1 "$(cat "$WORK"/race.[0-9] | sort -u | wc -l)" "every client got the same body"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'race'")" "one event"

note "bad input changes nothing"
before="$(sql "SELECT (SELECT count(*) FROM crier.events) || '/' || (SELECT count(*) FROM crier.api_idempotency)")"
expect_error 422 unknown_event_type "an unknown event type" \
    "$(post "$KEY" /v1/events '{"type": "no.such.type", "entity_id": "x1"}' -H 'Idempotency-Key: bad-1')"
expect_error 422 invalid_payload "a payload failing the schema" \
    "$(post "$KEY" /v1/events '{"type": "comment.created", "entity_id": "x2", "payload": {"author": 5, "text": "t", "to": []}}')"
json "d['error']['message']" | grep -q "author" || fail "invalid_payload names the field: $(cat "$WORK/body")"
expect_error 400 malformed_json "malformed JSON" "$(post "$KEY" /v1/events '{"type": "comment.created",')"
expect_error 400 malformed_json "not JSON at all" "$(post "$KEY" /v1/events 'type=comment.created')"
expect_error 400 malformed_json "an empty body" "$(post "$KEY" /v1/events '')"
expect_error 400 invalid_field "a number for a string" "$(post "$KEY" /v1/events '{"type": "comment.created", "entity_id": 12}')"
expect_error 400 invalid_field "a string for the payload object" \
    "$(post "$KEY" /v1/events '{"type": "comment.created", "entity_id": "x3", "payload": "{}"}')"
expect_error 400 invalid_field "an array body" "$(post "$KEY" /v1/events '[1, 2]')"
expect_error 400 invalid_field "an unknown field" "$(post "$KEY" /v1/events '{"type": "comment.created", "entity": "x4"}')"
expect_error 400 invalid_field "a missing field" "$(post "$KEY" /v1/events '{"type": "comment.created"}')"
expect_error 400 invalid_field "an entity id with a newline" \
    "$(post "$KEY" /v1/events '{"type": "comment.created", "entity_id": "x\ny", "payload": {"author": "a", "text": "b", "to": []}}')"
expect_error 400 invalid_field "an event type with a quote" "$(post "$KEY" /v1/events '{"type": "a'"'"';drop", "entity_id": "x5"}')"
expect_error 400 malformed_json "a body with a NUL byte" \
    "$(as "$KEY" POST /v1/events -H 'Content-Type: application/json' --data-binary @<(printf '{"type": "comment.created"}\0{"x": 1}'))"
expect_error 415 unsupported_media_type "a body that is not declared JSON" \
    "$(as "$KEY" POST /v1/events -H 'Content-Type: text/plain' --data-binary "$COMMENT")"
head -c 70000 /dev/zero | tr '\0' ' ' >"$WORK/big.json"
expect_error 413 payload_too_large "an oversized body (Content-Length)" \
    "$(as "$KEY" POST /v1/events -H 'Content-Type: application/json' --data-binary @"$WORK/big.json")"
expect_error 413 payload_too_large "an oversized chunked body" \
    "$(as "$KEY" POST /v1/events -H 'Content-Type: application/json' -H 'Transfer-Encoding: chunked' --data-binary @"$WORK/big.json")"
expect_error 400 invalid_header "an Idempotency-Key with spaces" \
    "$(post "$KEY" /v1/events "$COMMENT" -H 'Idempotency-Key: two words')"
expect_error 400 invalid_header "an Idempotency-Key that is too long" \
    "$(post "$KEY" /v1/events "$COMMENT" -H "Idempotency-Key: $(head -c 201 /dev/zero | tr '\0' k)")"
expect_error 400 invalid_header "a header value with a CR" \
    "$(raw "POST /v1/events HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer $KEY\r\nIdempotency-Key: a\rX-Injected: 1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")"
expect_error 400 invalid_header "a header value with a control character" \
    "$(raw "GET /v1/feed/counts?user=ann HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer $KEY\r\nX-Trace: a\x01b\r\nConnection: close\r\n\r\n")"
code=$(raw "GET /v1/feed/counts?user=ann HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer $KEY\r\nX-Trace: a\nb\r\nConnection: close\r\n\r\n")
assert_eq 400 "$code" "a header broken by a bare LF is refused (by the HTTP parser)"
expect_error 400 invalid_field "a query parameter with CR/LF" "$(as "$KEY" GET '/v1/feed?user=ann%0d%0aX-Injected:%201')"
expect_error 400 invalid_field "a query parameter with a NUL" "$(as "$KEY" GET '/v1/feed?user=ann%00bob')"
expect_error 400 invalid_field "an id that is not a number" "$(as "$KEY" GET "/v1/notifications/1%20OR%201=1")"
expect_error 400 invalid_field "an id that is too long" "$(as "$KEY" GET "/v1/events/1234567890123456789012")"
expect_error 404 not_found "an unknown endpoint" "$(as "$KEY" GET /v1/nothing)"
expect_error 405 method_not_allowed "a wrong method" "$(as "$KEY" DELETE /v1/events)"
header Allow | grep -q POST || fail "405 lists the allowed methods"
assert_eq "$before" "$(sql "SELECT (SELECT count(*) FROM crier.events) || '/' || (SELECT count(*) FROM crier.api_idempotency)")" \
    "no bad request wrote anything"

note "auth"
expect_error 401 unauthorized "no credentials" "$(call GET '/v1/feed?user=ann')"
[ "$(header WWW-Authenticate)" = "Bearer" ] || fail "401 says WWW-Authenticate: Bearer"
expect_error 401 unauthorized "another scheme" "$(call GET '/v1/feed?user=ann' -H "Authorization: Basic $KEY")"
expect_error 401 invalid_api_key "an unknown key" "$(as crk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA GET '/v1/feed?user=ann')"
KEY2=$("$CRIER_BIN" keys create --tenant acme --name soon-revoked 2>/dev/null)
assert_eq 200 "$(as "$KEY2" GET '/v1/feed/counts?user=ann')" "a second key works"
key2_id=$(sql "SELECT id FROM crier.api_keys WHERE name = 'soon-revoked'")
"$CRIER_BIN" keys revoke "$key2_id" | grep -q "revoked API key $key2_id" || fail "keys revoke"
expect_error 401 api_key_revoked "a revoked key" "$(as "$KEY2" GET '/v1/feed/counts?user=ann')"
"$CRIER_BIN" keys list --tenant acme 2>/dev/null | grep -q "revoked=" || fail "keys list shows the revocation"
if "$CRIER_BIN" keys list --tenant acme --json | grep -q "$KEY"; then fail "keys list never shows a key"; fi
if "$CRIER_BIN" keys revoke "$key2_id" >/dev/null 2>&1; then fail "revoking twice says there is no active key"; fi

note "the feed"
wait_for "SELECT count(*) = 3 FROM crier.feed_items WHERE recipient_id IN ('ann', 'bob')" 30 "the comments reach the feeds"
assert_eq 200 "$(as "$KEY" GET '/v1/feed?user=ann')" "ann's feed"
assert_eq 2 "$(json "len(d['items'])")" "ann has two items"
assert_eq "cy commented" "$(json "d['items'][1]['content']['title']")" "the item's content"
assert_eq '<b>hi</b>' "$(json "d['items'][1]['content']['body']")" "content is returned literally (escaping is the reader's job)"
assert_eq "false false" "$(json "' '.join(str(i['read']).lower() for i in d['items'])")" "unread"
assert_eq 200 "$(as "$KEY" GET '/v1/feed/counts?user=ann')" "counts"
assert_eq '2 2' "$(json "'%d %d' % (d['unread'], d['unseen'])")" "two unread, two unseen"
expect_error 400 invalid_field "an API key must name the user" "$(as "$KEY" GET /v1/feed)"

item=$(sql "SELECT f.id FROM crier.feed_items f JOIN crier.events e ON e.entity_id = 'c1' JOIN crier.notifications n ON n.id = f.notification_id AND n.event_id = e.id WHERE f.recipient_id = 'ann'")
bob_item=$(sql "SELECT id FROM crier.feed_items WHERE recipient_id = 'bob'")
assert_eq 200 "$(as "$KEY" POST "/v1/feed/items/$item/seen?user=ann")" "mark one seen"
assert_eq "true false" "$(json "'%s %s' % (str(d['seen']).lower(), str(d['read']).lower())")" "seen, not read"
assert_eq 200 "$(as "$KEY" POST "/v1/feed/items/$item/read?user=ann")" "mark one read"
assert_eq true "$(json "d['read']")" "read"
assert_eq 200 "$(as "$KEY" GET '/v1/feed/counts?user=ann')" "counts"
assert_eq '1 1' "$(json "'%d %d' % (d['unread'], d['unseen'])")" "one left"
assert_eq 200 "$(as "$KEY" POST "/v1/feed/items/$item/unread?user=ann")" "mark one unread"
assert_eq false "$(json "d['read']")" "unread again"
assert_eq 200 "$(as "$KEY" POST "/v1/feed/items/$item/archive?user=ann")" "archive"
assert_eq 200 "$(as "$KEY" GET '/v1/feed?user=ann')" "the feed"
assert_eq 1 "$(json "len(d['items'])")" "an archived item leaves the feed"
assert_eq 200 "$(as "$KEY" GET '/v1/feed?user=ann&archived=true')" "the feed with archived items"
assert_eq 2 "$(json "len(d['items'])")" "archived=true shows it"
assert_eq 200 "$(as "$KEY" POST "/v1/feed/items/$item/unarchive?user=ann")" "unarchive"
expect_error 404 not_found "bob's item is not in ann's feed" "$(as "$KEY" POST "/v1/feed/items/$bob_item/read?user=ann")"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.feed_states WHERE item_id = $bob_item")" "bob's item is untouched"
expect_error 404 not_found "an unknown action" "$(as "$KEY" POST "/v1/feed/items/$item/delete?user=ann")"
expect_error 404 not_found "an unknown item" "$(as "$KEY" POST "/v1/feed/items/999999/read?user=ann")"

note "pagination"
for i in 1 2 3 4 5; do
    assert_eq 201 "$(post "$KEY" /v1/events "{\"type\": \"comment.created\", \"entity_id\": \"p$i\", \"payload\": {\"author\": \"a\", \"text\": \"$i\", \"to\": [\"pam\"]}}")" "emit p$i"
done
wait_for "SELECT count(*) = 5 FROM crier.feed_items WHERE recipient_id = 'pam'" 30 "pam's five items"
original=$(sql "SELECT string_agg(id::text, ',' ORDER BY id DESC) FROM crier.feed_items WHERE recipient_id = 'pam'")
assert_eq 200 "$(as "$KEY" GET '/v1/feed?user=pam&limit=2')" "page 1"
page1=$(json "','.join(str(i['id']) for i in d['items'])")
cursor=$(json "d['next_cursor']")
head_cursor=$(json "d['head_cursor']")
[ "$cursor" != null ] && [ -n "$cursor" ] || fail "page 1 has a next cursor"
# two items arrive while pam pages
for i in 6 7; do
    post "$KEY" /v1/events "{\"type\": \"comment.created\", \"entity_id\": \"p$i\", \"payload\": {\"author\": \"a\", \"text\": \"$i\", \"to\": [\"pam\"]}}" >/dev/null
done
wait_for "SELECT count(*) = 7 FROM crier.feed_items WHERE recipient_id = 'pam'" 30 "pam's new items"
assert_eq 200 "$(as "$KEY" GET "/v1/feed?user=pam&limit=2&cursor=$cursor")" "page 2"
page2=$(json "','.join(str(i['id']) for i in d['items'])")
cursor2=$(json "d['next_cursor']")
assert_eq null "$(json "d['head_cursor']")" "only the first page has a head cursor"
assert_eq 200 "$(as "$KEY" GET "/v1/feed?user=pam&limit=2&cursor=$cursor2")" "page 3"
page3=$(json "','.join(str(i['id']) for i in d['items'])")
assert_eq null "$(json "d['next_cursor']")" "the last page has no next cursor"
assert_eq "$original" "$page1,$page2,$page3" "the pages are the feed as it was: no duplicates, no gaps"
expect_error 400 invalid_field "a page larger than the maximum" "$(as "$KEY" GET '/v1/feed?user=pam&limit=101')"
expect_error 400 invalid_field "a page of zero" "$(as "$KEY" GET '/v1/feed?user=pam&limit=0')"
assert_eq 200 "$(as "$KEY" GET '/v1/feed?user=pam&limit=100')" "the maximum page"
tampered=$(/usr/bin/python3 -c '
import sys
c = sys.argv[1]; i = 6
print(c[:i] + ("A" if c[i] != "A" else "B") + c[i + 1:])' "$cursor")
expect_error 400 invalid_cursor "an altered cursor" "$(as "$KEY" GET "/v1/feed?user=pam&limit=2&cursor=$tampered")"
expect_error 400 invalid_cursor "a made-up cursor" "$(as "$KEY" GET "/v1/feed?user=pam&cursor=AQAAAAAAAAAFAAAAAAAAAAAAAAAAAAAAAA")"
expect_error 400 invalid_cursor "garbage" "$(as "$KEY" GET "/v1/feed?user=pam&cursor=not*a*cursor")"
expect_error 400 invalid_cursor "pam's cursor in ann's feed" "$(as "$KEY" GET "/v1/feed?user=ann&limit=2&cursor=$cursor")"
expect_error 400 invalid_cursor "a live-feed cursor in the archived list" \
    "$(as "$KEY" GET "/v1/feed?user=pam&limit=2&archived=true&cursor=$cursor")"
expect_error 400 invalid_cursor "a page cursor as a read-all cursor" \
    "$(post "$KEY" '/v1/feed/read-all?user=pam' "{\"cursor\": \"$cursor\"}")"

note "mark all read up to what was shown (head cursor)"
assert_eq 200 "$(post "$KEY" '/v1/feed/read-all?user=pam' "{\"cursor\": \"$head_cursor\"}")" "read-all up to the head of page 1"
# the head was p5 (page 1 was loaded before p6 and p7 arrived)
assert_eq '2 2' "$(json "'%d %d' % (d['unread'], d['unseen'])")" "the two newer items stay unread"
assert_eq 200 "$(post "$KEY" '/v1/feed/seen-all?user=pam' '')" "seen-all"
assert_eq '2 0' "$(json "'%d %d' % (d['unread'], d['unseen'])")" "all seen, two unread"

note "exact mark-all-read through the API"
nid() { sql "INSERT INTO crier.notifications (key_hash, key, tenant, event_id, event_type, entity_id, recipient_id)
             SELECT gen_random_uuid(), '$1', 'acme', min(id), 'comment.created', '$1', 'ann' FROM crier.events
             RETURNING id"; }
late=$(nid late)
early=$(nid early)
(psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 <<SQL
BEGIN;
INSERT INTO crier.feed_items (tenant, recipient_id, notification_id, event_type, content)
VALUES ('acme', 'ann', $late, 'comment.created', '{"title": "late"}');
SELECT pg_sleep(2);
COMMIT;
SQL
) >/dev/null &
late_pid=$!
sleep 0.5
sql "INSERT INTO crier.feed_items (tenant, recipient_id, notification_id, event_type, content)
     VALUES ('acme', 'ann', $early, 'comment.created', '{\"title\": \"early\"}')" >/dev/null
assert_eq 200 "$(post "$KEY" '/v1/feed/read-all?user=ann' '')" "read-all while a transaction is open"
wait "$late_pid" || fail "the late transaction failed"
assert_eq 200 "$(as "$KEY" GET '/v1/feed?user=ann')" "ann's feed"
assert_eq '["early:True", "late:False"]' \
    "$(json "sorted('%s:%s' % (i['content'].get('title'), i['read']) for i in d['items'] if i['content'].get('title') in ('late', 'early'))")" \
    "the item committed after the click (begun before it) stays unread; the one before is read"

note "user tokens"
TOKEN=$("$CRIER_BIN" token --tenant acme --user ann)
[[ $TOKEN == cut1.* ]] || fail "crier token printed '$TOKEN'"
assert_eq 200 "$(as "$TOKEN" GET /v1/feed)" "ann's token reads ann's feed"
assert_eq 4 "$(json "len(d['items'])")" "all of ann's items"
assert_eq 200 "$(as "$TOKEN" GET '/v1/feed/counts?user=ann')" "?user= may repeat the token's user"
expect_error 403 forbidden "ann's token cannot read bob's feed" "$(as "$TOKEN" GET '/v1/feed?user=bob')"
expect_error 403 forbidden "nor bob's counts" "$(as "$TOKEN" GET '/v1/feed/counts?user=bob')"
expect_error 403 forbidden "nor mark all of bob's read" "$(as "$TOKEN" POST '/v1/feed/read-all?user=bob')"
expect_error 404 not_found "nor mark bob's item" "$(as "$TOKEN" POST "/v1/feed/items/$bob_item/read")"
for ep in "POST /v1/events" "GET /v1/events/$EVENT1" "POST /v1/tokens" "GET /v1/notifications/1" "GET /v1/dead" \
    "POST /v1/dead/replay"; do
    expect_error 403 forbidden "a user token on $ep" "$(as "$TOKEN" ${ep% *} "${ep#* }" -H 'Content-Type: application/json' -d '{}')"
done
assert_eq 201 "$(post "$KEY" /v1/tokens '{"user": "bob", "ttl_seconds": 60}')" "a token from the API"
BOB=$(json "d['token']")
assert_eq bob "$(json "d['user']")" "for bob"
[[ "$(json "d['expires_at']")" == 20*Z ]] || fail "expires_at is a UTC timestamp: $(cat "$WORK/body")"
assert_eq 200 "$(as "$BOB" GET /v1/feed)" "bob's token"
assert_eq 1 "$(json "len(d['items'])")" "bob's one item"
expect_error 400 invalid_field "a token that lives too long" "$(post "$KEY" /v1/tokens '{"user": "bob", "ttl_seconds": 100000}')"
expect_error 400 invalid_field "a token without a user" "$(post "$KEY" /v1/tokens '{"ttl_seconds": 60}')"
SHORT=$("$CRIER_BIN" token --tenant acme --user ann --ttl 1s)
sleep 2.2
expect_error 401 token_expired "an expired token" "$(as "$SHORT" GET /v1/feed)"
FORGED=$(token_with_claim "$TOKEN" u bob)
expect_error 401 invalid_token "a token whose user was changed" "$(as "$FORGED" GET /v1/feed)"
expect_error 401 invalid_token "a token with a made-up signature" \
    "$(as "${TOKEN%.*}.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" GET /v1/feed)"
expect_error 401 invalid_token "a malformed token" "$(as "cut1.%%%.###" GET /v1/feed)"

note "a notification's status and attempts"
assert_eq 201 "$(post "$KEY" /v1/events '{"type": "invoice.created", "entity_id": "inv_1", "payload": {"invoice_id": "inv_1", "amount_cents": 1250}}')" \
    "an invoice"
inv_event=$(json "d['id']")
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'delivered' AND target = '$HOOK_URL'" 30 \
    "the invoice webhook is delivered after one retry"
assert_eq 200 "$(as "$KEY" GET "/v1/events/$inv_event")" "the event"
assert_eq done "$(json "d['state']")" "fanned out"
notification=$(json "d['notifications'][0]['id']")
assert_eq 200 "$(as "$KEY" GET "/v1/notifications/$notification")" "the notification"
assert_eq delivered "$(json "d['status']")" "delivered"
assert_eq billing "$(json "d['recipient']")" "its recipient"
[[ "$(json "d['message_id']")" == msg_* ]] || fail "the notification's message id"
assert_eq "$(json "d['message_id']")" "$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["headers"]["webhook-id"])' "$HOOK_LOG")" \
    "the message id is the webhook-id the receiver got"
assert_eq 2 "$(json "d['deliveries'][0]['attempts']")" "two attempts"
assert_eq "1:retry:500 2:delivered:204" \
    "$(json "' '.join('%d:%s:%s' % (a['number'], a['outcome'], a['status']) for a in d['deliveries'][0]['attempt_log'])")" \
    "every attempt, with its outcome and status"
assert_eq true "$(json "all(a['started_at'] and a['duration_ms'] >= 0 for a in d['deliveries'][0]['attempt_log'])")" \
    "attempts have a start and a duration"
expect_error 404 not_found "an unknown notification" "$(as "$KEY" GET /v1/notifications/99999999)"
expect_error 404 not_found "an unknown event" "$(as "$KEY" GET /v1/events/99999999)"

note "dead letters"
for i in 1 2 3; do
    post "$KEY" /v1/events "{\"type\": \"alert.raised\", \"entity_id\": \"al$i\", \"payload\": {\"n\": $i}}" >/dev/null
done
wait_for "SELECT count(*) = 3 FROM crier.deliveries WHERE state = 'dead'" 30 "three refused alerts die"
assert_eq 200 "$(as "$KEY" GET /v1/dead)" "the dead letters"
assert_eq 3 "$(json "len(d['items'])")" "three"
assert_eq "delivery 400" "$(json "'%s %s' % (d['items'][0]['kind'], d['items'][0]['last_status'])")" "kind and last status"
assert_eq 200 "$(as "$KEY" GET '/v1/dead?limit=1')" "page 1 of the dead letters"
dead1=$(json "d['items'][0]['id']")
dcursor=$(json "d['next_cursor']")
assert_eq 200 "$(as "$KEY" GET "/v1/dead?limit=1&cursor=$dcursor")" "page 2"
dead2=$(json "d['items'][0]['id']")
dcursor=$(json "d['next_cursor']")
assert_eq 200 "$(as "$KEY" GET "/v1/dead?limit=1&cursor=$dcursor")" "page 3"
dead3=$(json "d['items'][0]['id']")
assert_eq null "$(json "d['next_cursor']")" "three pages"
assert_eq 3 "$(printf '%s\n' "$dead1" "$dead2" "$dead3" | sort -u | wc -l)" "three different dead letters"
assert_eq 200 "$(as "$KEY" GET '/v1/dead?channel=email')" "filter by channel"
assert_eq 0 "$(json "len(d['items'])")" "none by email"
assert_eq 200 "$(as "$KEY" GET '/v1/dead?type=alert.raised&kind=delivery&since=1h')" "filter by type, kind and time"
assert_eq 3 "$(json "len(d['items'])")" "all three"
assert_eq 200 "$(as "$KEY" GET '/v1/dead?until=1h')" "died before an hour ago"
assert_eq 0 "$(json "len(d['items'])")" "none"
expect_error 400 invalid_field "a bad channel" "$(as "$KEY" GET '/v1/dead?channel=pigeon')"
expect_error 400 invalid_field "a bad time" "$(as "$KEY" GET '/v1/dead?since=yesterdayish')"
expect_error 400 invalid_cursor "a feed cursor for the dead letters" "$(as "$KEY" GET "/v1/dead?cursor=$cursor")"
assert_eq 200 "$(post "$KEY" /v1/dead/replay "{\"id\": $dead1}")" "replay one dead delivery"
assert_eq "1 0" "$(json "'%d %d' % (d['deliveries'], d['remaining'])")" "one replayed, none left of that filter"
expect_error 404 not_found "replaying it again finds nothing dead" "$(post "$KEY" /v1/dead/replay "{\"id\": $dead1}")"
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'delivered' AND target = '$DEAD_URL'" 30 \
    "the replayed delivery is delivered"
assert_eq 200 "$(post "$KEY" /v1/dead/replay '{"channel": "webhook"}')" "replay the rest"
assert_eq "2 0" "$(json "'%d %d' % (d['deliveries'], d['remaining'])")" "two replayed"
expect_error 400 invalid_field "replay with an unknown filter" "$(post "$KEY" /v1/dead/replay '{"everything": true}')"

note "metrics"
assert_eq 200 "$(call GET /metrics)" "metrics"
[[ "$(header Content-Type)" == text/plain* ]] || fail "metrics are text/plain"
for m in 'crier_database_up 1' 'crier_events{state="pending"}' 'crier_events{state="dead"}' \
    'crier_outbox_oldest_pending_seconds' 'crier_deliveries{state="dead"}' 'crier_endpoints{state="paused"}' \
    'crier_rules_info{worker=' 'crier_rules_reloads_total{worker=' \
    'crier_http_requests_total{route="/v1/events",status="201"}' \
    'crier_http_requests_total{route="/v1/events",status="409"} 1' \
    'crier_http_requests_total{route="/v1/feed",status="200"}' 'crier_http_request_duration_seconds_count{route="/v1/feed"}' \
    '# TYPE crier_http_requests_total counter'; do
    grep -qF "$m" "$WORK/body" || fail "metrics have $m: $(cat "$WORK/body")"
done
if grep -q acme "$WORK/body"; then fail "metrics name no tenant"; fi

note "CORS"
assert_eq 204 "$(call OPTIONS /v1/feed -H 'Origin: https://app.example' -H 'Access-Control-Request-Method: GET' \
    -H 'Access-Control-Request-Headers: authorization')" "a preflight from an allowed origin"
assert_eq https://app.example "$(header Access-Control-Allow-Origin)" "allowed origin"
header Access-Control-Allow-Headers | grep -qi authorization || fail "the preflight allows the Authorization header"
header Access-Control-Allow-Methods | grep -q GET || fail "the preflight allows GET"
expect_error 403 cors_origin_not_allowed "a preflight from another origin" \
    "$(call OPTIONS /v1/feed -H 'Origin: https://evil.example' -H 'Access-Control-Request-Method: GET')"
assert_eq 200 "$(as "$TOKEN" GET /v1/feed -H 'Origin: https://app.example')" "a browser request"
assert_eq https://app.example "$(header Access-Control-Allow-Origin)" "answered with the origin"
assert_eq 200 "$(as "$TOKEN" GET /v1/feed -H 'Origin: https://evil.example')" "another origin"
[ -z "$(header Access-Control-Allow-Origin)" ] || fail "no CORS header for another origin"

note "a lost database connection is replaced"
sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'crier-api' AND datname = current_database()" >/dev/null
assert_eq 200 "$(as "$KEY" GET '/v1/feed/counts?user=ann')" "a request after the API's connections were killed"
assert_eq 200 "$(call GET /healthz)" "healthy"

note "healthz fails while an event cannot be fanned out"
# A share lock keeps the engine (FOR UPDATE SKIP LOCKED) away from an event
# that is made pending and due a minute ago.
(psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 <<SQL
BEGIN;
SELECT 1 FROM crier.events WHERE id = $EVENT1 FOR KEY SHARE;
SELECT pg_sleep(3);
COMMIT;
SQL
) >/dev/null &
lock_pid=$!
sleep 0.5
notifications_before=$(sql "SELECT count(*) FROM crier.notifications WHERE event_id = $EVENT1")
sql "UPDATE crier.events SET state = 'pending', available_at = now() - interval '60 seconds' WHERE id = $EVENT1" >/dev/null
assert_eq 503 "$(call GET /healthz)" "healthz while the outbox lags"
assert_eq "lagging outbox_lag" "$(json "d['status'] + ' ' + d['error']['code']")" "it says why"
wait "$lock_pid"
wait_for "SELECT state = 'done' FROM crier.events WHERE id = $EVENT1" 30 "the event is fanned out (again) once unlocked"
assert_eq 200 "$(call GET /healthz)" "healthy again"
assert_eq "$notifications_before" "$(sql "SELECT count(*) FROM crier.notifications WHERE event_id = $EVENT1")" \
    "fanning out again created nothing twice"

note "a rules reload reaches the API"
expect_error 422 unknown_event_type "poll.created before the reload" \
    "$(post "$KEY" /v1/events '{"type": "poll.created", "entity_id": "q1"}')"
write_rules 'crier.event_type "poll.created" { payload = {} }'
for _ in $(seq 100); do
    grep -q "reloaded (rules directory changed)" "$WORK/serve.log" && break
    sleep 0.1
done
for _ in $(seq 20); do # (the engine flags the API right after it logs the reload)
    st=$(post "$KEY" /v1/events '{"type": "poll.created", "entity_id": "q1"}')
    [ "$st" = 201 ] && break
    sleep 0.1
done
assert_eq 201 "$st" "poll.created after the reload"
grep -q "the API validates intake with rules version" "$WORK/serve.log" || fail "the API says it reloaded"

note "graceful stop"
kill -TERM "$SERVE_PID"
rc=0
wait "$SERVE_PID" || rc=$?
assert_eq 0 "$rc" "serve exits cleanly on SIGTERM (log: $(tail -5 "$WORK/serve.log"))"
grep -q "HTTP API stopped" "$WORK/serve.log" || fail "the API stopped"
if curl -s -o /dev/null "$API/healthz"; then fail "nothing listens after the stop"; fi
# without --http there is no API
assert_eq "" "$(grep -h "listening on" "$WORK"/*.log | grep -v "$API" || true)" "one API only"
echo "ok"
