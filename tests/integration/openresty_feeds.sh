#!/usr/bin/env bash
# Feeds at the edge: nginx (crier.nginx_feed) and crier serve answer the same
# requests with the same JSON — the first page and the next (with cursors
# either one signed), counts, mark-one, mark-all-read with the page's head
# cursor — for a user token and for an API key with ?user=; a forged token, a
# token of another tenant, an altered cursor and another person's feed are
# refused by both alike.
. "$(dirname "$0")/../support/lib.sh"
. "$CRIER_SOURCE_DIR/tests/support/nginx/nginx.sh"

new_db
mkdir -p "$WORK/rules"
note_rules
for t in acme globex; do
    "$CRIER_BIN" keys create --tenant "$t" --name edge >"$WORK/key.$t" 2>/dev/null || fail "keys create $t"
done
KEY=$(cat "$WORK/key.acme")
for i in $(seq 7); do
    sql "SELECT crier.emit('acme', 'note.created', 'n$i', '{\"text\": \"note $i <b>&amp;</b>\"}')" >/dev/null
done
sql "SELECT crier.emit('globex', 'note.created', 'g1', '{\"text\": \"globex\"}')" >/dev/null
"$CRIER_BIN" serve --rules "$WORK/rules" --exit-when-idle >"$WORK/fanout.log" 2>&1 || fail "fan-out: $(cat "$WORK/fanout.log")"
assert_eq 7 "$(sql "SELECT count(*) FROM crier.feed('acme', 'ann', NULL, 50)")" "ann's feed items"

start_api api
RULES_DIR="$WORK/rules"
EXTRA_LOCATIONS='location /v1/feed { content_by_lua_block { require("crier.nginx_feed").serve() } }' \
    start_nginx "$NGINX_SUPPORT/openresty.conf.in"
TOKEN=$("$CRIER_BIN" token --tenant acme --user ann)
GLOBEX_TOKEN=$("$CRIER_BIN" token --tenant globex --user ann)

sans_snapshot() {
    sed -e 's/"last_event_id":"[0-9:,]*"/"last_event_id":"<snapshot>"/' -e 's/"head_cursor":"[A-Za-z0-9_-]*"/"head_cursor":"<head>"/' <<<"$1"
}

# both METHOD PATH AUTH [BODY]: the same request to crier serve and to nginx;
# fails unless status and body are equal. Sets BOTH (the body).
both() {
    local method=$1 path=$2 auth=$3 body=${4:-} s1 s2 args=()
    [ -n "$body" ] && args=(-H "Content-Type: ${CONTENT_TYPE:-application/json}" --data-binary "$body")
    s1=$(curl -sS -o "$WORK/serve.body" -w '%{http_code}' -X "$method" -H "Authorization: Bearer $auth" \
        "${args[@]}" "$API$path")
    s2=$(curl -sS -o "$WORK/nginx.body" -w '%{http_code}' -X "$method" -H "Authorization: Bearer $auth" \
        "${args[@]}" "$BASE$path")
    BOTH=$(cat "$WORK/serve.body")
    # A first page carries the snapshot it was read at (last_event_id, and
    # inside head_cursor): xids are cluster-wide, so a transaction anywhere in
    # the shared cluster between the two requests changes it. Compared apart.
    assert_eq "$s1 $(sans_snapshot "$BOTH")" "$s2 $(sans_snapshot "$(cat "$WORK/nginx.body")")" \
        "$method $path: crier serve vs nginx"
    NGINX_BODY=$(cat "$WORK/nginx.body")
}

both GET "/v1/feed?limit=3" "$TOKEN"
json_field "$BOTH" items 2 content | grep -q "note 5" || fail "the first page: $BOTH"
next=$(json_field "$BOTH" next_cursor)
head=$(json_field "$BOTH" head_cursor)
[ -n "$next" ] && [ -n "$head" ] || fail "cursors: $BOTH"
both GET "/v1/feed?limit=3&cursor=$next" "$TOKEN"
next2=$(json_field "$BOTH" next_cursor)
both GET "/v1/feed?limit=3&cursor=$next2" "$TOKEN"
assert_eq "" "$(json_field "$BOTH" next_cursor)" "the last page"
both GET "/v1/feed?limit=3&archived=true" "$TOKEN"
both GET "/v1/feed/counts" "$TOKEN"
assert_eq "7 7" "$(json_field "$BOTH" unread) $(json_field "$BOTH" unseen)" "counts"
item=$(sql "SELECT id FROM crier.feed('acme', 'ann', NULL, 50) ORDER BY id LIMIT 1")
# Mark-one: to nginx first, then the same to serve (idempotent: same answer).
both POST "/v1/feed/items/$item/read" "$TOKEN"
assert_eq true "$(json_field "$BOTH" read)" "item marked read"
both POST "/v1/feed/items/$item/unread" "$TOKEN"
both POST "/v1/feed/items/$item/seen" "$TOKEN"
both POST "/v1/feed/items/999999/read" "$TOKEN"
both POST "/v1/feed/items/x/read" "$TOKEN"
both POST "/v1/feed/items/$item/frobnicate" "$TOKEN"
both GET "/v1/feed/counts" "$TOKEN"
assert_eq "7 6" "$(json_field "$BOTH" unread) $(json_field "$BOTH" unseen)" "counts after marks"
# An API key names the person.
both GET "/v1/feed?limit=2&user=ann" "$KEY"
both GET "/v1/feed/counts" "$KEY"
both GET "/v1/feed/counts?user=bob" "$KEY"
# Bad arguments.
both GET "/v1/feed?limit=0" "$TOKEN"
both GET "/v1/feed?limit=101" "$TOKEN"
both GET "/v1/feed?archived=maybe" "$TOKEN"
# Refusals: another person, a forged or foreign token, an altered cursor.
both GET "/v1/feed?user=bob" "$TOKEN"
assert_eq forbidden "$(json_field "$BOTH" error code)" "another person's feed"
both GET "/v1/feed" "$(token_with_claim "$TOKEN" u bob)"
assert_eq invalid_token "$(json_field "$BOTH" error code)" "a token with its user changed"
both GET "/v1/feed" "$(token_with_claim "$TOKEN" t globex)"
assert_eq invalid_token "$(json_field "$BOTH" error code)" "a token moved to another tenant"
both GET "/v1/feed" "${TOKEN%.*}.$(printf 'A%.0s' $(seq 43))"
both GET "/v1/feed" "cut1.garbage"
both GET "/v1/feed" "crk_short"
altered=$(/usr/bin/python3 -c 'import sys; c = sys.argv[1]; print(c[:12] + ("B" if c[12] != "B" else "C") + c[13:])' "$next")
both GET "/v1/feed?limit=3&cursor=$altered" "$TOKEN"
assert_eq invalid_cursor "$(json_field "$BOTH" error code)" "an altered cursor"
both GET "/v1/feed/counts" "$GLOBEX_TOKEN"
assert_eq "1 1" "$(json_field "$BOTH" unread) $(json_field "$BOTH" unseen)" "globex's ann sees globex's feed only"
both GET "/v1/feed?limit=3&cursor=$next" "$GLOBEX_TOKEN"
assert_eq invalid_cursor "$(json_field "$BOTH" error code)" "acme's cursor with globex's token"

CONTENT_TYPE=text/plain both POST "/v1/feed/read-all" "$TOKEN" "{}"
assert_eq unsupported_media_type "$(json_field "$BOTH" error code)" "a body that is not JSON"
# nginx's head cursor is good at crier serve (and serve's at nginx): made alike.
both GET "/v1/feed?limit=3" "$TOKEN"
nginx_head=$(json_field "$NGINX_BODY" head_cursor)
[ -n "$nginx_head" ] || fail "nginx's head cursor: $NGINX_BODY"
curl -sS -o "$WORK/cross" -w '%{http_code}' -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    --data-binary "{\"cursor\": \"$nginx_head\"}" "$API/v1/feed/seen-all" >"$WORK/cross.status"
assert_eq 200 "$(cat "$WORK/cross.status")" "nginx's head cursor at crier serve: $(cat "$WORK/cross")"
# Mark all read with the head cursor: through nginx, then the same from serve.
both POST "/v1/feed/read-all" "$TOKEN" "{\"cursor\": \"$head\"}"
assert_eq "0 0" "$(json_field "$BOTH" unread) $(json_field "$BOTH" unseen)" "read-all with the head cursor (read is seen too)"
both POST "/v1/feed/seen-all" "$TOKEN" "{}"
assert_eq "0 0" "$(json_field "$BOTH" unread) $(json_field "$BOTH" unseen)" "seen-all without a cursor"

stop_nginx
nginx_log_clean
echo "ok"
