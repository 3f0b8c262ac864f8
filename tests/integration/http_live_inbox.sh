#!/usr/bin/env bash
# Live inbox edges (issue 10 item 12), against a real `crier serve --http`
# and a real SSE client: an inbox that loads its first page, follows the live
# feed from that page's id and marks all read with the cursor of the newest
# item it has shown marks exactly what it was shown — not an item whose
# transaction began earlier and committed later (lower position), not one
# that arrived after — whether the cursor came from the page or the stream;
# and a stream whose user token expires tells the client where it stopped,
# refuses the old token with token_expired, and resumes with a fresh token
# and that id with exactly the items missed, none twice.
. "$(dirname "$0")/../support/lib.sh"
. "$(dirname "$0")/../support/sse.sh"
new_db
mkdir -p "$WORK/rules"
cp "$CRIER_SOURCE_DIR/tests/support/feed_rules/comments.lua" "$WORK/rules/"
start_api serve --stream-keepalive 0.5s
KEY=$("$CRIER_BIN" keys create --tenant acme --name tests 2>/dev/null)
ANN=$("$CRIER_BIN" token --tenant acme --user ann 2>/dev/null)

# comment ENTITY TEXT USER: emits a comment for USER and waits for its item.
comment() {
    sql "SELECT crier.emit('acme', 'comment.created', '$1', '{\"text\": \"$2\", \"to\": [\"$3\"]}')" >/dev/null
    wait_for "SELECT count(*) = 1 FROM crier.feed_items WHERE content->>'title' = '$2'" 10 "'$2' fanned out"
}
# late_begin FD TITLE ENTITY: a transaction, driven through a FIFO on file
# descriptor FD, that inserts an item of team:late (ann's audience) for the
# event of ENTITY and stays open: its item has a lower position than
# anything emitted meanwhile.
late_begin() {
    mkfifo "$WORK/late$1.fifo"
    psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 <"$WORK/late$1.fifo" >"$WORK/late$1.out" 2>&1 &
    eval "LATE_PID_$1=$!"
    PIDS+=("$!")
    eval "exec $1>\"\$WORK/late\$1.fifo\""
    echo "BEGIN; INSERT INTO crier.audience_items (tenant, audience, event_id, event_type, content)
          VALUES ('acme', 'team:late', (SELECT id FROM crier.events WHERE entity_id = '$3'), 'comment.created', '{\"title\": \"$2\"}');
          SELECT 'inserted';" >&"$1"
    for _ in $(seq 100); do grep -q inserted "$WORK/late$1.out" && break; sleep 0.05; done
    grep -q inserted "$WORK/late$1.out" || fail "the late transaction did not insert: $(cat "$WORK/late$1.out")"
}
late_commit() { # FD (psql quits on \q: a client started since holds the FIFO open too)
    printf 'COMMIT;\n\\q\n' >&"$1"
    eval "exec $1>&-"
    wait "$(eval echo "\$LATE_PID_$1")" || fail "the late transaction: $(cat "$WORK/late$1.out")"
}
# read_all CURSOR: POST /v1/feed/read-all {"cursor": CURSOR} as ann; prints the status.
read_all() {
    curl -s -o "$WORK/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $ANN" \
        -H 'Content-Type: application/json' -d "{\"cursor\": \"$1\"}" "$API/v1/feed/read-all"
}
# states: ann's feed as "title:read" pairs, oldest first.
states() {
    curl -s -H "Authorization: Bearer $ANN" "$API/v1/feed?limit=100" |
        /usr/bin/python3 -c 'import json, sys
print(" ".join("%s:%s" % (i["content"]["title"], "read" if i["read"] else "unread")
               for i in reversed(json.load(sys.stdin)["items"])))'
}
unread() { curl -s -H "Authorization: Bearer $ANN" "$API/v1/feed/counts" | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["unread"])'; }

sql "SELECT crier.join_audience('acme', 'team:late', 'ann')" >/dev/null
comment c1 one ann

# 1. The first page: its newest item's head cursor, and the id to follow the
# live feed from (what commits after the page was read).
late_begin 7 late-one c1
comment c2 two ann
curl -s -H "Authorization: Bearer $ANN" "$API/v1/feed" >"$WORK/page.json"
page() { /usr/bin/python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))[sys.argv[2]]; print(v if v is not None else "null")' "$WORK/page.json" "$1"; }
HEAD=$(page head_cursor)
SINCE=$(page last_event_id)
[ "$SINCE" != null ] && [ -n "$SINCE" ] || fail "the first page gives the id to follow the live feed from: $(cat "$WORK/page.json")"
stream ann "$API/v1/feed/stream?access_token=$ANN&last_event_id=$SINCE"
wait_events ann "len(ev) >= 1" "ann's stream opens"

# 2. An item whose transaction began before the page was read (lower
# position than the page's head) and committed after it arrives live; the
# page's head cursor does not mark it read (the page did not show it).
late_commit 7
wait_events ann "'late-one' in [i['content']['title'] for i in items]" "the late item arrives on the stream"
assert_eq 200 "$(read_all "$HEAD")" "read-all up to the page's head ($(cat "$WORK/body"))"
assert_eq "one:read late-one:unread two:read" "$(states)" "the page's head cursor marks what the page showed"

# 3. Stream items carry their cursor: read-all with the cursor of the newest
# item shown marks everything the stream delivered up to it — and not an
# item whose transaction began earlier (lower position) but committed after
# that item was sent, nor one that arrived after.
late_begin 8 late-two c2
comment c3 three ann
wait_events ann "'three' in [i['content']['title'] for i in items]" "'three' arrives on the stream"
C3=$(events ann "[i for i in items if i['content']['title'] == 'three'][0].get('cursor') or ''")
[ -n "$C3" ] || fail "a stream item carries its cursor: $(events ann "items[-1]")"
late_commit 8
wait_events ann "'late-two' in [i['content']['title'] for i in items]" "the second late item arrives"
comment c4 four ann
wait_events ann "'four' in [i['content']['title'] for i in items]" "'four' arrives on the stream"
assert_eq 200 "$(read_all "$C3")" "read-all up to the stream item 'three' ($(cat "$WORK/body"))"
assert_eq "one:read late-one:read two:read late-two:unread three:read four:unread" "$(states)" \
    "a stream item's cursor marks exactly what the stream had delivered up to it"
assert_eq 2 "$(unread)" "two unread: the late commit and the later item"

# 4. Every counts event carries the head cursor of everything the stream has
# delivered: read-all with the last one marks all of it, not what came after.
wait_events ann "ev[-1]['event'] == 'counts' and ev[-1]['data']['unread'] == 2" "the counts follow the read-all"
H2=$(events ann "ev[-1]['data'].get('head_cursor') or ''")
[ -n "$H2" ] || fail "a counts event carries the stream's head cursor: $(events ann "ev[-1]")"
comment c5 five ann
assert_eq 200 "$(read_all "$H2")" "read-all with the stream's head cursor ($(cat "$WORK/body"))"
assert_eq "one:read late-one:read two:read late-two:read three:read four:read five:unread" "$(states)" \
    "the stream's head cursor marks what the stream delivered, not what came after"
assert_eq 200 "$(read_all "$C3")" "read-all again with an older cursor ($(cat "$WORK/body"))"
assert_eq "one:read late-one:read two:read late-two:read three:read four:read five:unread" "$(states)" \
    "an older cursor un-reads nothing"

# 5. The cursors are ann's: another person (or tenant) cannot use them.
code=$(curl -s -o "$WORK/body" -w '%{http_code}' -X POST -H "Authorization: Bearer $KEY" \
    -H 'Content-Type: application/json' -d "{\"cursor\": \"$C3\"}" "$API/v1/feed/read-all?user=bob")
assert_eq 400 "$code" "ann's stream cursor on bob's feed"
grep -q invalid_cursor "$WORK/body" || fail "invalid_cursor for a borrowed cursor: $(cat "$WORK/body")"
kill "$PID_ann"

# 6. Token refresh: a stream whose user token expires ends with an expired
# event that carries the id to resume from; the browser's EventSource
# reconnecting with the old token gets 401 token_expired (the code that says
# "get a new token"); a new stream with a fresh token and that id gets
# exactly what was missed, nothing twice.
SHORT=$("$CRIER_BIN" token --tenant acme --user cy --ttl 3s 2>/dev/null)
stream cy "$API/v1/feed/stream?access_token=$SHORT"
wait_events cy "len(ev) >= 1" "cy's stream opens"
comment x1 x-one cy
wait_events cy "'x-one' in [i['content']['title'] for i in items]" "x-one arrives"
wait_events cy "end and ev[-1]['event'] == 'expired'" "the stream ends with an expired event" 15
assert_eq token_expired "$(events cy "ev[-1]['data']['error']['code']")" "the expired event's code"
RESUME=$(events cy "ev[-1].get('id', '')")
[ -n "$RESUME" ] || fail "the expired event carries an id to resume from: $(events cy "ev[-1]")"
assert_eq "$RESUME" "$(events cy "ev[-1]['data'].get('last_event_id')")" "the expired event names the id to resume from"
comment x2 x-two cy
stream cy_retry "$API/v1/feed/stream?access_token=$SHORT" "Last-Event-ID: $RESUME"
wait_events cy_retry "'status' in head" "the reconnection with the expired token is answered"
assert_eq 401 "$(events cy_retry "head['status']")" "the expired token is refused"
assert_eq token_expired "$(events cy_retry "body['error']['code']")" "the refusal says the token expired"
FRESH=$("$CRIER_BIN" token --tenant acme --user cy 2>/dev/null)
stream cy2 "$API/v1/feed/stream?access_token=$FRESH&last_event_id=$RESUME"
wait_events cy2 "'x-two' in [i['content']['title'] for i in items]" "the item missed while the token was renewed arrives"
comment x3 x-three cy
wait_events cy2 "'x-three' in [i['content']['title'] for i in items]" "a new item arrives on the renewed stream"
sleep 0.5
assert_eq "x-two | x-three" "$(titles cy2)" "exactly the items missed and the new one, none twice"
echo "ok"
