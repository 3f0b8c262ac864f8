#!/usr/bin/env bash
# Live feeds: GET /v1/feed/stream (Server-Sent Events driven by LISTEN/NOTIFY)
# against a real `crier serve --http`, read by a real SSE client: new items of
# a person and of their audiences arrive, nobody else's; an item whose
# transaction commits after a later one still arrives (snapshot diffs, not
# positions); counts follow mark-all-read; a client that reconnects with its
# Last-Event-ID gets what it missed and nothing twice, or a resync when it
# missed too much; bad ids, tokens and keys are refused; clients that leave
# are let go; a stream ends when its user token expires, its API key is
# revoked or its tenant's secret rotates (tokens); the hub survives
# losing its database connections; SIGTERM ends every stream.
. "$(dirname "$0")/../support/lib.sh"
. "$(dirname "$0")/../support/sse.sh"
new_db
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "comment.created" { payload = { author = "string", text = "string", to = "array" } }
crier.event_type "release.published" { payload = { version = "string" } }
crier.rule "comment.created" {
    recipients = function(event) return event.payload.to end,
    channels = { "feed" },
    feed = { title = "{{ payload.author }}: {{ payload.text }}" },
}
crier.rule "release.published" {
    mode = "read",
    audience = "team:core",
    feed = { title = "Release {{ payload.version }}" },
}
LUA

start_api serve --stream-keepalive 0.5s
KEY=$("$CRIER_BIN" keys create --tenant acme --name tests 2>/dev/null)
KEY_B=$("$CRIER_BIN" keys create --tenant globex --name tests 2>/dev/null)
ANN=$("$CRIER_BIN" token --tenant acme --user ann 2>/dev/null)
[[ $ANN == cut1.* ]] || fail "crier token printed '$ANN'"

emit() { sql "SELECT crier.emit('$1', '$2', '$3', '$4')" >/dev/null; }
metric() { curl -s "$API/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

# 1. Three streams: ann with a user token in the URL (a browser's
# EventSource), bob with an API key, and globex's ann (another tenant).
stream ann "$API/v1/feed/stream?access_token=$ANN"
stream bob "$API/v1/feed/stream?user=bob" "Authorization: Bearer $KEY"
stream gann "$API/v1/feed/stream?user=ann" "Authorization: Bearer $KEY_B"
for s in ann bob gann; do
    wait_events $s "len(ev) >= 1" "$s's stream opens with its counts"
    assert_eq 200 "$(events $s "head['status']")" "$s's stream status"
    assert_eq "text/event-stream" "$(events $s "head['content_type']")" "$s's stream content type"
    assert_eq '{"event": "counts", "unread": 0, "unseen": 0}' \
        "$(events $s "json.dumps({'event': ev[0]['event'], 'unread': ev[0]['data']['unread'], 'unseen': ev[0]['data']['unseen']})")" \
        "$s's first event"
    [ -n "$(events $s "ev[0]['id']")" ] || fail "$s's first event carries an id"
done
assert_eq 3 "$(metric crier_http_streams_open)" "three streams open"

# 2. A comment for ann arrives on ann's stream, nowhere else.
t0=$(date +%s%N)
emit acme comment.created c1 '{"author": "cy", "text": "hello", "to": ["ann"]}'
wait_events ann "any(e['event'] == 'item' for e in ev)" "ann's comment arrives live"
note "item on the live feed $(( ($(date +%s%N) - t0) / 1000000 )) ms after the emit (engine poll 0.2 s)"
assert_eq "cy: hello" "$(titles ann)" "ann's item"
assert_eq "direct" "$(events ann "[e for e in ev if e['event'] == 'item'][0]['data']['kind']")" "a direct item"
wait_events ann "ev[-1]['event'] == 'counts' and (ev[-1]['data']['unread'], ev[-1]['data']['unseen']) == (1, 1)" "counts follow"

# 3. Audiences: ann joins team:core (a membership change: resync), a release
# reaches its members only.
sql "SELECT crier.join_audience('acme', 'team:core', 'ann')" >/dev/null
wait_events ann "any(e['event'] == 'resync' for e in ev)" "a membership change asks for a reload"
emit acme release.published r1 '{"version": "1.0"}'
wait_events ann "'Release 1.0' in [e['data']['content']['title'] for e in ev if e['event'] == 'item']" \
    "the audience's release arrives"
emit acme comment.created c2 '{"author": "cy", "text": "for bob", "to": ["bob"]}'
wait_events bob "any(e['event'] == 'item' for e in ev)" "bob's own comment arrives"
assert_eq "cy: for bob" "$(titles bob)" "bob got only his own item (not the release: not a member)"
assert_eq "" "$(titles gann)" "globex's ann got nothing of acme's ann"

# A bulk fan-out (one statement writing items for more than 16 people) sends
# one tenant-wide announcement instead of one per person; each streaming
# person still gets their item.
psql -XAtq "$CRIER_DATABASE_URL" -c "LISTEN crier_feed" -c "SELECT pg_sleep(3)" >"$WORK/listen.out" 2>&1 &
LISTEN_PID=$!
sleep 0.5
emit acme comment.created c6 "{\"author\": \"cy\", \"text\": \"all hands\", \"to\": [\"ann\", \"bob\"$(printf ', "p%d"' $(seq 18))]}"
wait_events ann "'cy: all hands' in [e['data']['content']['title'] for e in ev if e['event'] == 'item']" "ann's bulk item"
wait_events bob "'cy: all hands' in [e['data']['content']['title'] for e in ev if e['event'] == 'item']" "bob's bulk item"
wait "$LISTEN_PID" || true
grep -q 'payload "P4:acme"' "$WORK/listen.out" || fail "one tenant-wide announcement for the bulk: $(cat "$WORK/listen.out")"
[ "$(grep -c 'payload "p' "$WORK/listen.out")" = 0 ] || fail "no per-person announcements for the bulk: $(cat "$WORK/listen.out")"

# 4. Exact under out-of-order commits: an item inserted first (lower
# position) but committed after a later one still arrives.
sql "SELECT crier.join_audience('acme', 'team:late', 'ann')" >/dev/null
eid=$(sql "SELECT id FROM crier.events WHERE entity_id = 'r1'")
# The late transaction is driven through a FIFO: it inserts, then commits
# only once the later item has reached the stream.
mkfifo "$WORK/late.fifo"
psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 <"$WORK/late.fifo" >"$WORK/late.out" 2>&1 &
LATE_PID=$!
exec 7>"$WORK/late.fifo"
echo "BEGIN; INSERT INTO crier.audience_items (tenant, audience, event_id, event_type, content)
      VALUES ('acme', 'team:late', $eid, 'release.published', '{\"title\": \"late\"}');
      SELECT 'inserted';" >&7
for _ in $(seq 100); do grep -q inserted "$WORK/late.out" && break; sleep 0.05; done
grep -q inserted "$WORK/late.out" || fail "the late transaction did not insert: $(cat "$WORK/late.out")"
emit acme comment.created c3 '{"author": "cy", "text": "early", "to": ["ann"]}'
wait_events ann "'cy: early' in [e['data']['content']['title'] for e in ev if e['event'] == 'item']" \
    "the later-started item that committed first arrives"
sleep 0.3
assert_eq 0 "$(events ann "[e['data']['content']['title'] for e in ev if e['event'] == 'item'].count('late')")" \
    "nothing of the open transaction is sent"
echo "COMMIT;" >&7
exec 7>&-
wait "$LATE_PID" || fail "the late transaction: $(cat "$WORK/late.out")"
wait_events ann "'late' in [e['data']['content']['title'] for e in ev if e['event'] == 'item']" \
    "the item committed late (lower position) arrives too, after the later one"
late_id=$(sql "SELECT id FROM crier.audience_items WHERE audience = 'team:late'")
early_id=$(sql "SELECT id FROM crier.feed_items WHERE content->>'title' = 'cy: early'")
[ "$late_id" -lt "$early_id" ] || fail "the late item should have the lower position ($late_id vs $early_id)"
assert_eq 1 "$(events ann "[e['data']['content']['title'] for e in ev if e['event'] == 'item'].count('late')")" \
    "sent once"

# 5. Mark all read (through the API, as the person): the counts follow.
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $ANN" "$API/v1/feed/read-all")
assert_eq 200 "$code" "read-all"
wait_events ann "ev[-1]['event'] == 'counts' and ev[-1]['data']['unread'] == 0" "unread drops to 0 on the stream"

# 6. Resume: what arrived while ann was away, once, after reconnecting with
# the last id.
last=$(events ann "[e for e in ev if 'id' in e][-1]['id']")
kill "$PID_ann"
emit acme comment.created c4 '{"author": "dee", "text": "while away", "to": ["ann"]}'
wait_for "SELECT count(*) = 1 FROM crier.feed_items WHERE content->>'title' = 'dee: while away'" 10 "c4 fanned out"
stream ann2 "$API/v1/feed/stream" "Authorization: Bearer $ANN" "Last-Event-ID: $last"
wait_events ann2 "any(e['event'] == 'item' for e in ev)" "the missed item arrives after reconnecting"
sleep 0.5
assert_eq "dee: while away" "$(titles ann2)" "only what was missed"
# …and with ?last_event_id= (clients that cannot set headers)
stream ann3 "$API/v1/feed/stream?access_token=$ANN&last_event_id=$last"
wait_events ann3 "any(e['event'] == 'item' for e in ev)" "resume by query parameter"
assert_eq "dee: while away" "$(titles ann3)" "resume by query parameter: only what was missed"

# 7. Too much missed: a resync instead of hundreds of items.
last=$(events ann2 "[e for e in ev if 'id' in e][-1]['id']")
kill "$PID_ann2" "$PID_ann3"
sql "SELECT count(crier.emit('acme', 'comment.created', 'bulk' || i,
       jsonb_build_object('author', 'bot', 'text', i::text, 'to', jsonb_build_array('ann'))))
     FROM generate_series(1, 120) i" >/dev/null
wait_for "SELECT count(*) = 120 FROM crier.feed_items WHERE content->>'title' LIKE 'bot:%'" 30 "bulk fanned out"
stream ann4 "$API/v1/feed/stream" "Authorization: Bearer $ANN" "Last-Event-ID: $last"
wait_events ann4 "any(e['event'] == 'resync' for e in ev)" "more than 100 missed items: resync"
assert_eq 0 "$(events ann4 "len([e for e in ev if e['event'] == 'item'])")" "no items with the resync"

# 8. Refused: each with a JSON error, nothing opened.
refused() { # STATUS CODE WHAT URL [HEADER…]
    local status=$1 code=$2 what=$3 url=$4
    shift 4
    local args=()
    for h in "$@"; do args+=(-H "$h"); done
    # (bounded: a refusal that is not one would otherwise be an endless stream)
    got=$(curl -s --max-time 10 -o "$WORK/body" -w '%{http_code}' "${args[@]}" "$url" || true)
    assert_eq "$status" "$got" "$what (status; $(cat "$WORK/body"))"
    assert_eq "$code" "$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["error"]["code"])' "$WORK/body")" "$what (code)"
}
opened=$(metric crier_http_streams_opened_total)
refused 400 invalid_cursor "a made-up Last-Event-ID" "$API/v1/feed/stream" "Authorization: Bearer $ANN" "Last-Event-ID: 5:3:"
refused 400 invalid_cursor "a Last-Event-ID that is not a snapshot" "$API/v1/feed/stream" "Authorization: Bearer $ANN" "Last-Event-ID: abc"
refused 401 unauthorized "an API key in the URL" "$API/v1/feed/stream?user=ann&access_token=$KEY"
# the signature's first character changed (the last one may carry only
# padding bits, and a "change" to the same character is no change)
sig=${ANN##*.}
first=${sig:0:1}
[ "$first" = A ] && other=B || other=A
refused 401 invalid_token "a forged token in the URL" "$API/v1/feed/stream?access_token=${ANN%.*}.$other${sig:1}"
refused 401 unauthorized "no credentials" "$API/v1/feed/stream"
refused 403 forbidden "ann's token for bob's stream" "$API/v1/feed/stream?user=bob&access_token=$ANN"
refused 400 invalid_field "an API key without ?user=" "$API/v1/feed/stream" "Authorization: Bearer $KEY"
refused 401 unauthorized "access_token is for the stream only" "$API/v1/feed?access_token=$ANN"
assert_eq "$opened" "$(metric crier_http_streams_opened_total)" "no stream opened by a refused request"

# A stream opened with a user token ends when the token expires.
SHORT=$("$CRIER_BIN" token --tenant acme --user ann --ttl 2s 2>/dev/null)
stream short "$API/v1/feed/stream?access_token=$SHORT"
wait_events short "len(ev) >= 1" "a short-lived token's stream opens"
wait_events short "end and ev[-1]['event'] == 'expired'" "the stream ends with an expired event when the token expires" 10
assert_eq token_expired "$(events short "ev[-1]['data']['error']['code']")" "the expired event's code"

# Revoking the API key that opened a stream ends it; so does rotating the
# tenant's secret for a stream opened with a user token (API-key streams of
# that tenant stay: keys survive a rotation).
KEY_SHORT=$("$CRIER_BIN" keys create --tenant acme --name short-lived 2>/dev/null)
stream revk "$API/v1/feed/stream?user=cy" "Authorization: Bearer $KEY_SHORT"
GTOKEN=$("$CRIER_BIN" token --tenant globex --user ann 2>/dev/null)
stream rot "$API/v1/feed/stream" "Authorization: Bearer $GTOKEN"
wait_events revk "len(ev) >= 1" "the stream of a key about to be revoked opens"
wait_events rot "len(ev) >= 1" "the stream of a token about to be voided opens"
key_id=$(sql "SELECT id FROM crier.api_keys WHERE name = 'short-lived'")
"$CRIER_BIN" keys revoke "$key_id" >/dev/null 2>&1 || fail "crier keys revoke"
wait_events revk "end and ev[-1]['event'] == 'revoked'" "the revoked key's stream ends with a revoked event" 10
"$CRIER_BIN" keys rotate-secret --tenant globex >/dev/null 2>&1 || fail "crier keys rotate-secret"
wait_events rot "end and ev[-1]['event'] == 'revoked'" "a token stream ends when its tenant's secret rotates" 10
sleep 1
assert_eq false "$(events gann "end")" "globex's API-key stream stays open across the rotation"

# 9. Clients that leave are let go (noticed at the next keepalive).
kill "$PID_ann4" "$PID_gann"
for _ in $(seq 50); do [ "$(metric crier_http_streams_open)" = 1 ] && break; sleep 0.1; done
assert_eq 1 "$(metric crier_http_streams_open)" "only bob's stream is left open"

# 10. The hub loses its database connections and reconnects: nothing missed.
stream ann5 "$API/v1/feed/stream" "Authorization: Bearer $ANN"
wait_events ann5 "len(ev) >= 1" "a new stream opens"
killed=$(sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'crier-api-live' AND datname = current_database()")
assert_eq 2 "$killed" "the hub's two connections terminated"
emit acme comment.created c5 '{"author": "eve", "text": "after the outage", "to": ["ann"]}'
wait_events ann5 "'eve: after the outage' in [e['data']['content']['title'] for e in ev if e['event'] == 'item']" \
    "an item committed while the hub reconnects arrives" 15

# 11. SIGTERM ends every stream, and serve exits.
kill -TERM "$SERVE_PID"
for _ in $(seq 100); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$SERVE_PID" 2>/dev/null && fail "serve still runs 10 s after SIGTERM with open streams"
wait "$SERVE_PID" || fail "serve exited with an error: $(tail -5 "$WORK/serve.log")"
wait_events bob "end" "bob's stream ended with the server"
wait_events ann5 "end" "ann's stream ended with the server"
echo "ok"
