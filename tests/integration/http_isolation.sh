#!/usr/bin/env bash
# Tenants are walled off in the HTTP API: tenant B's API key, B's user tokens,
# a token forged to claim tenant A, and A's cursors replayed by B try every
# endpoint against tenant A's events, notifications, feed items, dead letters,
# idempotency keys, and a person's preferences and settings. Each gets 404/403/401/400 or B's own (empty) data —
# never a byte of A's — and A's state is unchanged afterwards.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks --statuses 400
HOOK_URL=$RECEIVER_URL

mkdir -p "$WORK/rules"
cp "$CRIER_SOURCE_DIR/tests/support/feed_rules/comments.lua" "$WORK/rules/"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "invoice.created" { payload = { invoice_id = "string" } }
crier.rule "invoice.created" {
    recipients = { "billing" },
    channels = { "webhook" },
    webhook = {
        url = crier.setting("hook_url"),
        body = function(event) return { invoice_id = event.payload.invoice_id } end,
        retry = { 0 },
    },
}
LUA

start_api serve --set "hook_url=$HOOK_URL"

call() { # METHOD PATH [curl args…] → status; body in $WORK/body
    local method=$1 path=$2
    shift 2
    curl -sS --max-time 30 -o "$WORK/body" -w '%{http_code}' -X "$method" "$@" "$API$path"
}
as() { # CREDENTIAL METHOD PATH [curl args…]
    local cred=$1 method=$2 path=$3
    shift 3
    call "$method" "$path" -H "Authorization: Bearer $cred" -H 'Content-Type: application/json' "$@"
}
json() {
    /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v))' "$WORK/body" "$1"
}

KA=$("$CRIER_BIN" keys create --tenant acme 2>/dev/null)
KB=$("$CRIER_BIN" keys create --tenant globex 2>/dev/null)
TA=$("$CRIER_BIN" token --tenant acme --user ann)
TB=$("$CRIER_BIN" token --tenant globex --user ann) # the same user id, another tenant
TB_BOB=$("$CRIER_BIN" token --tenant globex --user bob)

# Tenant A's data, with markers that must never show up in B's answers.
assert_eq 201 "$(as "$KA" POST /v1/events -d '{"type": "comment.created", "entity_id": "shared-entity-1", "payload": {"text": "acme-private-text", "to": ["ann", "bob"]}}' -H 'Idempotency-Key: shared-key')" \
    "A's comment"
A_EVENT=$(json "d['id']")
assert_eq 201 "$(as "$KA" POST /v1/events -d '{"type": "invoice.created", "entity_id": "acme-invoice-1", "payload": {"invoice_id": "acme-invoice-1"}}')" \
    "A's invoice (its webhook is refused: a dead letter)"
A_INVOICE=$(json "d['id']")
assert_eq 201 "$(as "$KA" POST /v1/events -d '{"type": "comment.created", "entity_id": "acme-entity-2", "payload": {"text": "acme-private-text", "to": ["ann"]}}')" \
    "A's second comment"
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'dead'" 30 "A's dead letter"
wait_for "SELECT count(*) = 3 FROM crier.feed_items" 30 "A's feed items"
A_ITEM=$(sql "SELECT min(id) FROM crier.feed_items WHERE tenant = 'acme' AND recipient_id = 'ann'")
A_NOTIFICATION=$(sql "SELECT notification_id FROM crier.feed_items WHERE id = $A_ITEM")
A_WEBHOOK_NOTIFICATION=$(sql "SELECT notification_id FROM crier.deliveries WHERE state = 'dead'")
A_DELIVERY=$(sql "SELECT id FROM crier.deliveries WHERE state = 'dead'")
sql "UPDATE crier.events SET state = 'dead', last_error = 'acme-private-error', processed_at = now() WHERE id = $A_EVENT" >/dev/null
assert_eq 200 "$(as "$KA" GET '/v1/feed?user=ann&limit=1')" "A's feed page"
A_CURSOR_HEAD=$(json "d['head_cursor']")
assert_eq 200 "$(as "$KA" GET '/v1/dead?limit=1')" "A's dead letters"
A_DEAD_CURSOR=$(json "d['next_cursor']")
[ "$A_DEAD_CURSOR" != null ] || fail "A has two dead letters (a page of one has a next cursor)"
assert_eq 200 "$(as "$KA" GET '/v1/feed?user=ann&limit=1')" "A's feed, page 1 of 2"
A_FEED_CURSOR=$(json "d['next_cursor']")
[ "$A_FEED_CURSOR" != null ] || fail "A's ann has a second page"
assert_eq 200 "$(as "$KA" PATCH '/v1/preferences?user=ann' -d '{"preferences": [{"event_type": "acme.private", "channel": "*", "enabled": false}], "settings": {"locale": "en-acme", "time_zone": "UTC"}}')" \
    "A's ann's preferences and settings"
state_of_a() {
    sql "SELECT string_agg(x, ' ' ORDER BY x) FROM (
           SELECT 'event:' || id || ':' || state FROM crier.events WHERE tenant = 'acme'
           UNION ALL SELECT 'delivery:' || id || ':' || state || ':' || attempts FROM crier.deliveries WHERE tenant = 'acme'
           UNION ALL SELECT 'states:' || count(*) FROM crier.feed_states WHERE tenant = 'acme'
           UNION ALL SELECT 'marks:' || count(*) FROM crier.feed_watermarks WHERE tenant = 'acme'
           UNION ALL SELECT 'idem:' || count(*) FROM crier.api_idempotency WHERE tenant = 'acme'
           UNION ALL SELECT 'pref:' || recipient_id || '/' || event_type || '/' || channel || '=' || enabled || '@' || updated_at
                     FROM crier.preferences WHERE tenant = 'acme'
           UNION ALL SELECT 'settings:' || recipient_id || '/' || concat_ws(',', time_zone, locale, quiet_hours::text, updated_at)
                     FROM crier.recipient_settings WHERE tenant = 'acme') s(x)"
}
A_BEFORE=$(state_of_a)

# no_a_data LABEL: the last body holds nothing of tenant A's
no_a_data() {
    if grep -qE "acme|$HOOK_URL" "$WORK/body"; then
        fail "$1: tenant A's data leaked: $(cat "$WORK/body")"
    fi
}
# refused EXPECTED_STATUSES LABEL STATUS: one of the statuses, an error body, no A data
refused() {
    [[ " $1 " == *" $3 "* ]] || fail "$2: expected one of $1, got $3: $(cat "$WORK/body")"
    [ -n "$(json "d['error']['code']")" ] || fail "$2: an error body"
    no_a_data "$2"
}

note "B's API key against A's resources"
refused 404 "B reads A's event" "$(as "$KB" GET "/v1/events/$A_EVENT")"
refused 404 "B reads A's invoice event" "$(as "$KB" GET "/v1/events/$A_INVOICE")"
refused 404 "B reads A's notification" "$(as "$KB" GET "/v1/notifications/$A_NOTIFICATION")"
refused 404 "B reads A's webhook notification" "$(as "$KB" GET "/v1/notifications/$A_WEBHOOK_NOTIFICATION")"
for action in read unread seen unseen archive unarchive; do
    refused 404 "B marks A's item ($action)" "$(as "$KB" POST "/v1/feed/items/$A_ITEM/$action?user=ann")"
done
assert_eq 200 "$(as "$KB" GET '/v1/feed?user=ann')" "B reads its own ann's feed"
assert_eq '[]' "$(json "d['items']")" "B's ann has nothing"
no_a_data "B's feed of ann"
assert_eq 200 "$(as "$KB" GET '/v1/feed?user=ann&archived=true')" "B's archived feed of ann"
assert_eq '[]' "$(json "d['items']")" "nothing archived either"
assert_eq 200 "$(as "$KB" GET '/v1/feed/counts?user=ann')" "B's counts for ann"
assert_eq '0 0' "$(json "'%d %d' % (d['unread'], d['unseen'])")" "B's ann has no unread items"
# the live feed (a stream: read for a moment, then cut)
stream_as() { # CREDENTIAL PATH: prints the status; what arrived is in $WORK/body
    curl -sS -N --max-time 1.5 -o "$WORK/body" -w '%{http_code}' -H "Authorization: Bearer $1" "$API$2" 2>/dev/null || true
}
assert_eq 200 "$(stream_as "$KB" '/v1/feed/stream?user=ann')" "B's live feed of its own ann"
grep -q '"unread" : 0' "$WORK/body" || fail "B's live feed of ann starts with B's counts: $(cat "$WORK/body")"
no_a_data "B's live feed of ann"
assert_eq 200 "$(as "$KB" POST '/v1/feed/read-all?user=ann')" "B marks all of its own ann's items read"
assert_eq 200 "$(as "$KB" POST '/v1/feed/seen-all?user=ann')" "and seen"
refused 400 "B uses A's head cursor" "$(as "$KB" POST '/v1/feed/read-all?user=ann' -d "{\"cursor\": \"$A_CURSOR_HEAD\"}")"
refused 400 "B uses A's feed cursor" "$(as "$KB" GET "/v1/feed?user=ann&cursor=$A_FEED_CURSOR")"
refused 400 "B uses A's dead-letter cursor" "$(as "$KB" GET "/v1/dead?cursor=$A_DEAD_CURSOR")"
assert_eq 200 "$(as "$KB" GET /v1/dead)" "B's dead letters"
assert_eq '[]' "$(json "d['items']")" "B has none"
no_a_data "B's dead letters"
assert_eq 200 "$(as "$KB" GET '/v1/dead?kind=event&type=comment.created')" "B's dead events"
assert_eq '[]' "$(json "d['items']")" "none"
assert_eq 200 "$(as "$KB" GET '/v1/preferences?user=ann')" "B reads its own ann's preferences"
assert_eq '[] null' "$(json "'%s %s' % (json.dumps(d['preferences']), json.dumps(d['settings']['locale']))")" "B's ann has none"
no_a_data "B's preferences of ann"
assert_eq 200 "$(as "$KB" PATCH '/v1/preferences?user=ann' -d '{"preferences": [{"event_type": "*", "channel": "*", "enabled": false}], "settings": {"locale": "de"}}')" \
    "B changes its own ann's preferences (not A's: checked at the end)"
no_a_data "B's changed preferences of ann"
refused 404 "B replays A's dead delivery" "$(as "$KB" POST /v1/dead/replay -d "{\"id\": $A_DELIVERY}")"
refused 404 "B replays A's dead event" "$(as "$KB" POST /v1/dead/replay -d "{\"event\": $A_EVENT}")"
assert_eq 200 "$(as "$KB" POST /v1/dead/replay -d '{}')" "B replays all of its own dead letters"
assert_eq "0 0 0" "$(json "'%d %d %d' % (d['deliveries'], d['events'], d['remaining'])")" "nothing of B's to replay"
# B emits the same natural key and reuses A's Idempotency-Key: its own event
assert_eq 201 "$(as "$KB" POST /v1/events -d '{"type": "comment.created", "entity_id": "shared-entity-1", "payload": {"text": "b", "to": ["ann"]}}' -H 'Idempotency-Key: shared-key')" \
    "B's event with A's natural key and Idempotency-Key is B's own (not a replay, not a conflict)"
B_EVENT=$(json "d['id']")
[ "$B_EVENT" != "$A_EVENT" ] || fail "B got A's event id"
[ "$(json "d['duplicate']")" = false ] || fail "B's event is not A's duplicate"
assert_eq 201 "$(as "$KB" POST /v1/tokens -d '{"user": "ann"}')" "B issues a token for its ann"
TB2=$(json "d['token']")
assert_eq 200 "$(as "$TB2" GET /v1/feed)" "B's API-issued token reads B's ann"
no_a_data "B's token's feed"

note "B's user tokens against A's resources"
for t in "$TB" "$TB_BOB"; do
    assert_eq 200 "$(as "$t" GET /v1/feed)" "a B token reads its own feed"
    no_a_data "a B token's feed"
    assert_eq 200 "$(as "$t" GET /v1/feed/counts)" "a B token's counts"
    no_a_data "a B token's counts"
    for action in read unread seen unseen archive unarchive; do
        refused 404 "a B token marks A's item ($action)" "$(as "$t" POST "/v1/feed/items/$A_ITEM/$action")"
    done
    refused 403 "a B token reads A's event" "$(as "$t" GET "/v1/events/$A_EVENT")"
    refused 403 "a B token reads A's notification" "$(as "$t" GET "/v1/notifications/$A_NOTIFICATION")"
    refused 403 "a B token lists dead letters" "$(as "$t" GET /v1/dead)"
    refused 403 "a B token replays" "$(as "$t" POST /v1/dead/replay -d "{\"id\": $A_DELIVERY}")"
    refused 403 "a B token emits" "$(as "$t" POST /v1/events -d '{"type": "comment.created", "entity_id": "z", "payload": {"text": "z", "to": []}}')"
    refused 403 "a B token issues tokens" "$(as "$t" POST /v1/tokens -d '{"user": "ann"}')"
    refused 400 "a B token uses A's cursor" "$(as "$t" GET "/v1/feed?cursor=$A_FEED_CURSOR")"
    assert_eq 200 "$(as "$t" GET /v1/preferences)" "a B token reads its own preferences"
    no_a_data "a B token's preferences"
    assert_eq 200 "$(as "$t" PATCH /v1/preferences -d '{"preferences": [{"event_type": "acme.private", "channel": "*", "enabled": true}]}')" \
        "a B token changes its own preferences"
done
refused 403 "B's bob token asks for ann's feed" "$(as "$TB_BOB" GET '/v1/feed?user=ann')"
refused 403 "B's bob token asks for ann's live feed" "$(as "$TB_BOB" GET '/v1/feed/stream?user=ann')"
refused 403 "B's bob token reads ann's preferences" "$(as "$TB_BOB" GET '/v1/preferences?user=ann')"
refused 403 "B's bob token changes ann's preferences" "$(as "$TB_BOB" PATCH '/v1/preferences?user=ann' -d '{"settings": {"locale": "fr"}}')"

note "forged tokens claiming tenant A"
# B's token with its claims changed to tenant A (B's signature kept)
SWAPPED=$(token_with_claim "$TB" t acme)
refused 401 "B's token relabelled as A's" "$(as "$SWAPPED" GET /v1/feed)"
# a token claiming tenant A, correctly signed with B's own secret (what B could make)
B_SECRET=$(sql "SELECT encode(secret, 'hex') FROM crier.api_tenants WHERE tenant = 'globex'")
FORGED=$(/usr/bin/python3 -c '
import base64, hashlib, hmac, json, sys, time
secret = bytes.fromhex(sys.argv[1])
b64 = lambda b: base64.urlsafe_b64encode(b).decode().rstrip("=")
claims = {"t": "acme", "u": "ann", "exp": int(time.time()) + 600}
signed = "cut1." + b64(json.dumps(claims, separators=(",", ":")).encode())
key = hmac.new(secret, b"crier/user-token/v1", hashlib.sha256).digest()
print(signed + "." + b64(hmac.new(key, signed.encode(), hashlib.sha256).digest()))' "$B_SECRET")
refused 401 "a token for A signed with B's secret" "$(as "$FORGED" GET /v1/feed)"
refused 401 "the forged token opens A's ann's live feed" "$(call GET "/v1/feed/stream?access_token=$FORGED")"
refused 401 "the relabelled token opens A's ann's live feed" "$(call GET "/v1/feed/stream?access_token=$SWAPPED")"
refused 401 "the forged token reads A's ann's preferences" "$(as "$FORGED" GET /v1/preferences)"
refused 401 "the forged token changes A's ann's preferences" "$(as "$FORGED" PATCH /v1/preferences -d '{"settings": {"locale": "fr"}}')"
refused 401 "the relabelled token changes A's ann's preferences" "$(as "$SWAPPED" PATCH /v1/preferences -d '{"settings": {"locale": "fr"}}')"
for action in read archive; do
    refused 401 "the forged token marks A's item ($action)" "$(as "$FORGED" POST "/v1/feed/items/$A_ITEM/$action")"
done
# the same construction with B's claims is accepted: the check above is the signature, not the format
GOOD=$(/usr/bin/python3 -c '
import base64, hashlib, hmac, json, sys, time
secret = bytes.fromhex(sys.argv[1])
b64 = lambda b: base64.urlsafe_b64encode(b).decode().rstrip("=")
claims = {"t": "globex", "u": "ann", "exp": int(time.time()) + 600}
signed = "cut1." + b64(json.dumps(claims, separators=(",", ":")).encode())
key = hmac.new(secret, b"crier/user-token/v1", hashlib.sha256).digest()
print(signed + "." + b64(hmac.new(key, signed.encode(), hashlib.sha256).digest()))' "$B_SECRET")
assert_eq 200 "$(as "$GOOD" GET /v1/feed)" "a well-made token for B"
no_a_data "a well-made token for B"

note "public endpoints name no tenant"
assert_eq 200 "$(call GET /metrics)" "metrics"
no_a_data "metrics"
if grep -q globex "$WORK/body"; then fail "metrics name no tenant"; fi
call GET /healthz >/dev/null
no_a_data "healthz"

note "A is unchanged, and A still works"
assert_eq "$A_BEFORE" "$(state_of_a)" "nothing of A's changed"
assert_eq 200 "$(as "$TA" GET /v1/feed)" "A's token"
assert_eq acme-private-text "$(json "d['items'][0]['content']['title']")" "A sees its own item"
assert_eq false "$(json "d['items'][0]['read']")" "still unread"
assert_eq 200 "$(as "$KA" GET "/v1/events/$A_EVENT")" "A reads its event"
assert_eq 200 "$(as "$KA" GET "/v1/notifications/$A_WEBHOOK_NOTIFICATION")" "A reads its notification"
assert_eq dead "$(json "d['status']")" "A's notification is still dead"
assert_eq 200 "$(as "$KA" GET /v1/dead)" "A's dead letters"
assert_eq 2 "$(json "len(d['items'])")" "both still there"
assert_eq 200 "$(as "$TA" GET /v1/preferences)" "A's ann reads her preferences"
assert_eq 'acme.private=false en-acme' "$(json "'%s=%s %s' % (d['preferences'][0]['event_type'], json.dumps(d['preferences'][0]['enabled']), d['settings']['locale'])")" \
    "A's ann's preferences and settings are as A set them"

note "rotating B's secret ends B's tokens and cursors, not A's"
"$CRIER_BIN" keys rotate-secret --tenant globex | grep -q "rotated" || fail "rotate-secret"
refused 401 "B's token after the rotation" "$(as "$TB" GET /v1/feed)"
assert_eq 200 "$(as "$TA" GET /v1/feed)" "A's token still works"
assert_eq 200 "$(as "$KB" GET '/v1/feed?user=ann')" "B's API key still works"
echo "ok"
