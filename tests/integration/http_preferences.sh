#!/usr/bin/env bash
# A person's preferences and settings over HTTP (GET and PATCH
# /v1/preferences) against a real `crier serve --http`: read, set, change and
# remove by API key and by user token, settings set and cleared field by
# field, repeated writes idempotent; every kind of bad input refused with a
# 400 naming what is wrong, and nothing of the request kept; another tenant's
# key and tokens, another user's token, forged and missing credentials reach
# nothing of acme's ann (checked in the tables); concurrent PATCHes of one
# person in opposite orders all succeed (no deadlock); a CORS preflight for
# PATCH; one /metrics series per route; and a preference set over HTTP
# honoured by the daemon's fan-out.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "news" { payload = {} }
crier.event_type "billing" { payload = {} }
local hook = { url = crier.setting("url"), retry = { 0 } }
crier.rule "news" { recipients = { "ann", "bob" }, channels = { "webhook" }, webhook = hook }
crier.rule "billing" { recipients = { "ann", "bob" }, channels = { "webhook" }, webhook = hook }
LUA
start_api serve --set "url=$RECEIVER_URL" --cors-origin https://app.example

call() { # METHOD PATH [curl args…] → status; body in $WORK/body, headers in $WORK/headers
    local method=$1 path=$2
    shift 2
    curl -sS --max-time 30 -o "$WORK/body" -D "$WORK/headers" -w '%{http_code}' -X "$method" "$@" "$API$path"
}
as() { # CREDENTIAL METHOD PATH [curl args…]
    local cred=$1 method=$2 path=$3
    shift 3
    call "$method" "$path" -H "Authorization: Bearer $cred" "$@"
}
patch() { # CREDENTIAL PATH JSON [curl args…]
    local cred=$1 path=$2 body=$3
    shift 3
    as "$cred" PATCH "$path" -H 'Content-Type: application/json' --data-binary "$body" "$@"
}
json() {
    /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v, sort_keys=True))' "$WORK/body" "$1"
}
header() { grep -i "^$1:" "$WORK/headers" | head -1 | cut -d' ' -f2- | tr -d '\r'; }
# the stored rows of a tenant's person: preferences, then settings
rows() { # TENANT USER
    sql "SELECT coalesce((SELECT string_agg(event_type || '/' || channel || '=' || enabled, ' ' ORDER BY event_type COLLATE \"C\", channel COLLATE \"C\")
                          FROM crier.preferences WHERE tenant = '$1' AND recipient_id = '$2'), '-')
             || ' | ' || coalesce((SELECT concat_ws(',', coalesce(time_zone, '~'), coalesce(locale, '~'), coalesce(quiet_hours::text, '~'))
                                   FROM crier.recipient_settings WHERE tenant = '$1' AND recipient_id = '$2'), '-')"
}
all_rows() {
    sql "SELECT count(*) || ':' || coalesce(string_agg(tenant || '/' || recipient_id || '/' || event_type || '/' || channel || '=' || enabled || '@' || updated_at, ' ' ORDER BY tenant, recipient_id, event_type, channel), '')
         FROM crier.preferences"
    sql "SELECT count(*) || ':' || coalesce(string_agg(tenant || '/' || recipient_id || '/' || concat_ws(',', time_zone, locale, quiet_hours::text, updated_at), ' ' ORDER BY tenant, recipient_id), '')
         FROM crier.recipient_settings"
}
expect_error() { # STATUS CODE LABEL STATUS_GOT [MESSAGE_PART]
    assert_eq "$1" "$4" "$3 (status; body $(cat "$WORK/body"))"
    assert_eq "$2" "$(json "d['error']['code']")" "$3 (error code)"
    local msg
    msg=$(json "d['error']['message']")
    [ -n "$msg" ] || fail "$3: the error has no message"
    if [ -n "${5:-}" ] && [[ "$msg" != *"$5"* ]]; then
        fail "$3: the message says '$5': $msg"
    fi
}

KA=$("$CRIER_BIN" keys create --tenant acme 2>/dev/null)
KB=$("$CRIER_BIN" keys create --tenant globex 2>/dev/null)
T_ANN=$("$CRIER_BIN" token --tenant acme --user ann)
T_BOB=$("$CRIER_BIN" token --tenant acme --user bob)
T_GLOBEX_ANN=$("$CRIER_BIN" token --tenant globex --user ann)

note "reading and writing by API key"
assert_eq 200 "$(as "$KA" GET '/v1/preferences?user=ann')" "GET with an API key"
assert_eq '{"preferences": [], "settings": {"locale": null, "quiet_hours": null, "time_zone": null}, "user": "ann"}' \
    "$(json d)" "nothing stored yet"
assert_eq 200 "$(patch "$KA" '/v1/preferences?user=ann' '{"preferences": [
    {"event_type": "news", "channel": "webhook", "enabled": false},
    {"event_type": "*", "channel": "email", "enabled": false},
    {"event_type": "billing", "channel": "*", "enabled": true}]}')" "PATCH preferences with an API key"
assert_eq '[{"channel": "email", "enabled": false, "event_type": "*"}, {"channel": "*", "enabled": true, "event_type": "billing"}, {"channel": "webhook", "enabled": false, "event_type": "news"}]' \
    "$(json "d['preferences']")" "the answer is the stored document"
assert_eq "*/email=false billing/*=true news/webhook=false | -" "$(rows acme ann)" "stored"
FIRST=$(cat "$WORK/body")
assert_eq 200 "$(patch "$KA" '/v1/preferences?user=ann' '{"preferences": [
    {"event_type": "news", "channel": "webhook", "enabled": false},
    {"event_type": "*", "channel": "email", "enabled": false},
    {"event_type": "billing", "channel": "*", "enabled": true}]}')" "the same PATCH again"
assert_eq "$FIRST" "$(cat "$WORK/body")" "the same answer"
assert_eq "*/email=false billing/*=true news/webhook=false | -" "$(rows acme ann)" "a repeated PATCH changes nothing"
assert_eq 200 "$(as "$KA" GET '/v1/preferences?user=ann')" "GET again"
assert_eq "$FIRST" "$(cat "$WORK/body")" "GET answers what PATCH did"

note "settings"
assert_eq 200 "$(patch "$KA" '/v1/preferences?user=ann' '{"settings": {"time_zone": "Europe/Berlin", "locale": "de-AT", "quiet_hours": [{"from": "22:00", "to": "07:00"}]}}')" \
    "PATCH settings"
assert_eq '{"locale": "de-AT", "quiet_hours": [{"from": "22:00", "to": "07:00"}], "time_zone": "Europe/Berlin"}' \
    "$(json "d['settings']")" "the stored settings in the answer"
assert_eq 3 "$(json "len(d['preferences'])")" "preferences untouched by a settings-only PATCH"
assert_eq 200 "$(patch "$KA" '/v1/preferences?user=ann' '{"settings": {"locale": null}}')" "clear one setting"
assert_eq '{"locale": null, "quiet_hours": [{"from": "22:00", "to": "07:00"}], "time_zone": "Europe/Berlin"}' \
    "$(json "d['settings']")" "null clears the locale; absent keys are left as they were"
assert_eq 200 "$(patch "$KA" '/v1/preferences?user=ann' '{"settings": {"quiet_hours": []}}')" "no quiet hours"
assert_eq '[]' "$(json "d['settings']['quiet_hours']")" "[] is stored (not null)"
assert_eq "*/email=false billing/*=true news/webhook=false | Europe/Berlin,~,[]" "$(rows acme ann)" "stored settings"

note "the person's own user token"
assert_eq 200 "$(as "$T_ANN" GET /v1/preferences)" "GET with ann's token"
assert_eq ann "$(json "d['user']")" "ann's document"
assert_eq 3 "$(json "len(d['preferences'])")" "ann's preferences"
assert_eq 200 "$(as "$T_ANN" GET '/v1/preferences?user=ann')" "?user= naming herself"
assert_eq 200 "$(patch "$T_ANN" /v1/preferences '{"preferences": [{"event_type": "*", "channel": "email", "enabled": null},
    {"event_type": "billing", "channel": "*", "enabled": false}], "settings": {"locale": "pt-BR"}}')" "PATCH with ann's token: one removed, one changed, a setting"
assert_eq "billing/*=false news/webhook=false | Europe/Berlin,pt-BR,[]" "$(rows acme ann)" "applied together"
assert_eq 200 "$(patch "$T_ANN" /v1/preferences '{"preferences": [{"event_type": "*", "channel": "email", "enabled": null}]}')" \
    "removing what is not there"
assert_eq "billing/*=false news/webhook=false | Europe/Berlin,pt-BR,[]" "$(rows acme ann)" "is a no-op"
assert_eq 200 "$(patch "$T_ANN" /v1/preferences '{"preferences": [{"event_type": "billing", "channel": "*", "enabled": null}]}')" \
    "ann removes her billing preference"

note "bad input: 400, and nothing of the request kept"
BEFORE=$(all_rows)
bad() { # LABEL MESSAGE_PART BODY [CREDENTIAL]
    expect_error 400 "$4" "$1" "$(patch "${5:-$KA}" '/v1/preferences?user=ann' "$3")" "$2"
    assert_eq "$BEFORE" "$(all_rows)" "$1: nothing changed"
}
bad "an unknown channel" "preferences[1]: channel must be *, webhook, email, kafka or feed, got 'pigeon'" \
    '{"preferences": [{"event_type": "news", "channel": "email", "enabled": false}, {"event_type": "news", "channel": "pigeon", "enabled": false}]}' invalid_field
bad "a bad event type" "preferences[0]: event type must be" \
    '{"preferences": [{"event_type": "news letter", "channel": "email", "enabled": false}]}' invalid_field
bad "enabled as a string" "preferences[0]: enabled must be true, false or null" \
    '{"preferences": [{"event_type": "news", "channel": "email", "enabled": "no"}]}' invalid_field
bad "enabled missing" "preferences[0]: enabled must be true, false or null (null removes the preference), got nothing" \
    '{"preferences": [{"event_type": "news", "channel": "email"}]}' invalid_field
bad "a number for a channel" "preferences[0]: channel must be a string" \
    '{"preferences": [{"event_type": "news", "channel": 7, "enabled": false}]}' invalid_field
bad "an unknown field in an entry" "preferences[0]: unknown field 'type'" \
    '{"preferences": [{"type": "news", "channel": "email", "enabled": false}]}' invalid_field
bad "an entry that is not an object" "preferences[0]: each entry must be an object" \
    '{"preferences": ["news"]}' invalid_field
bad "preferences as an object" "preferences must be a JSON array" \
    '{"preferences": {"event_type": "news", "channel": "email", "enabled": false}}' invalid_field
bad "a bad time zone (with a good preference before it)" "settings: 'Mars/Olympus' is not a time zone" \
    '{"preferences": [{"event_type": "news", "channel": "email", "enabled": false}], "settings": {"time_zone": "Mars/Olympus"}}' invalid_field
bad "a bad locale" "settings: 'Deutsch' is not a locale tag" '{"settings": {"locale": "Deutsch", "time_zone": "UTC"}}' invalid_field
bad "quiet hours out of range" 'settings: quiet_hours "to" must be a local time "HH:MM"' \
    '{"settings": {"quiet_hours": [{"from": "22:00", "to": "25:00"}]}}' invalid_field
bad "quiet hours not a list" "settings: quiet_hours must be a JSON array" '{"settings": {"quiet_hours": "22-07"}}' invalid_field
bad "quiet hours with a bad day" 'settings: quiet_hours day "someday"' \
    '{"settings": {"quiet_hours": [{"from": "22:00", "to": "07:00", "days": ["someday"]}]}}' invalid_field
bad "an unknown setting" "settings: unknown setting 'zone'" '{"settings": {"zone": "UTC"}}' invalid_field
bad "settings as a list" "settings: settings must be a JSON object" '{"settings": ["UTC"]}' invalid_field
bad "an unknown top-level field" "unknown field(s) in the request body: prefs" '{"prefs": []}' invalid_field
bad "nothing to change" "nothing to change" '{}' invalid_field
bad "nulls only" "nothing to change" '{"preferences": null, "settings": null}' invalid_field
bad "malformed JSON" "" '{"preferences": [' malformed_json
bad "a JSON list as the body" "must be a JSON object" '[]' invalid_field
bad "by ann's token too" "preferences[0]: channel must be" \
    '{"preferences": [{"event_type": "news", "channel": "sms", "enabled": false}]}' invalid_field "$T_ANN"
MANY=$(/usr/bin/python3 -c 'import json; print(json.dumps({"preferences": [{"event_type": "t%d" % i, "channel": "*", "enabled": False} for i in range(101)]}))')
bad "more than 100 entries" "at most 100" "$MANY" invalid_field
expect_error 400 malformed_json "an empty body" "$(as "$KA" PATCH '/v1/preferences?user=ann' -H 'Content-Type: application/json')"
expect_error 415 unsupported_media_type "a body that is not JSON" \
    "$(as "$KA" PATCH '/v1/preferences?user=ann' -H 'Content-Type: text/plain' --data-binary '{}')"
expect_error 400 invalid_field "an API key without ?user=" "$(as "$KA" GET /v1/preferences)" "query parameter user is required"
expect_error 400 invalid_field "an API key PATCHes without ?user=" \
    "$(patch "$KA" /v1/preferences '{"settings": {"locale": "de"}}')" "query parameter user is required"
expect_error 405 method_not_allowed "PUT is not a method here" "$(as "$KA" PUT '/v1/preferences?user=ann')"
[[ "$(header Allow)" == *PATCH* ]] || fail "Allow lists PATCH: $(header Allow)"
assert_eq "$BEFORE" "$(all_rows)" "nothing changed by any refused request"

note "another user, another tenant, forged and missing credentials"
ANN_ROWS=$(rows acme ann)
expect_error 403 forbidden "bob's token reads ann's preferences" "$(as "$T_BOB" GET '/v1/preferences?user=ann')" \
    "a user token may only read its own user's preferences"
expect_error 403 forbidden "bob's token changes ann's preferences" \
    "$(patch "$T_BOB" '/v1/preferences?user=ann' '{"preferences": [{"event_type": "*", "channel": "*", "enabled": false}]}')" \
    "a user token may only change its own user's preferences"
assert_eq 200 "$(as "$T_BOB" GET /v1/preferences)" "bob reads his own"
assert_eq '{"preferences": [], "settings": {"locale": null, "quiet_hours": null, "time_zone": null}, "user": "bob"}' \
    "$(json d)" "bob has nothing of ann's"
# globex's key and globex's ann (the same user id): globex's own, empty person
assert_eq 200 "$(as "$KB" GET '/v1/preferences?user=ann')" "globex's key reads its ann"
assert_eq '{"preferences": [], "settings": {"locale": null, "quiet_hours": null, "time_zone": null}, "user": "ann"}' \
    "$(json d)" "globex's ann has nothing of acme's ann"
assert_eq 200 "$(as "$T_GLOBEX_ANN" GET /v1/preferences)" "globex's ann's token"
assert_eq '[]' "$(json "d['preferences']")" "nothing of acme's"
assert_eq 200 "$(patch "$KB" '/v1/preferences?user=ann' '{"preferences": [{"event_type": "*", "channel": "*", "enabled": false}], "settings": {"time_zone": "Asia/Tokyo"}}')" \
    "globex's key writes its own ann"
assert_eq 200 "$(patch "$T_GLOBEX_ANN" /v1/preferences '{"preferences": [{"event_type": "billing", "channel": "webhook", "enabled": true}]}')" \
    "globex's ann's token writes her own"
assert_eq "*/*=false billing/webhook=true | Asia/Tokyo,~,~" "$(rows globex ann)" "written to globex"
assert_eq "$ANN_ROWS" "$(rows acme ann)" "acme's ann unchanged by globex's writes"
expect_error 403 forbidden "globex's ann's token names acme's bob" "$(as "$T_GLOBEX_ANN" GET '/v1/preferences?user=bob')"
SWAPPED=$(token_with_claim "$T_GLOBEX_ANN" t acme)
expect_error 401 invalid_token "globex's token relabelled as acme's (GET)" "$(as "$SWAPPED" GET /v1/preferences)"
expect_error 401 invalid_token "globex's token relabelled as acme's (PATCH)" \
    "$(patch "$SWAPPED" /v1/preferences '{"preferences": [{"event_type": "*", "channel": "*", "enabled": false}]}')"
BOB_AS_ANN=$(token_with_claim "$T_BOB" u ann)
expect_error 401 invalid_token "bob's token relabelled as ann's" \
    "$(patch "$BOB_AS_ANN" /v1/preferences '{"preferences": [{"event_type": "*", "channel": "*", "enabled": false}]}')"
expect_error 401 unauthorized "no credentials" "$(call GET '/v1/preferences?user=ann')"
expect_error 401 unauthorized "no credentials (PATCH)" \
    "$(call PATCH '/v1/preferences?user=ann' -H 'Content-Type: application/json' --data-binary '{"settings": {"locale": "de"}}')"
expect_error 401 invalid_api_key "a made-up API key" "$(as "crk_$(printf 'x%.0s' $(seq 43))" GET '/v1/preferences?user=ann')"
assert_eq "$ANN_ROWS" "$(rows acme ann)" "acme's ann unchanged"
assert_eq "- | -" "$(rows acme bob)" "acme's bob has nothing stored"
if grep -q "acme" "$WORK/body"; then fail "no error names acme"; fi

note "CORS"
assert_eq 204 "$(call OPTIONS /v1/preferences -H 'Origin: https://app.example' -H 'Access-Control-Request-Method: PATCH' \
    -H 'Access-Control-Request-Headers: authorization, content-type')" "the preflight of a browser's PATCH"
[[ "$(header Access-Control-Allow-Methods)" == *PATCH* ]] || fail "PATCH is allowed: $(header Access-Control-Allow-Methods)"
assert_eq https://app.example "$(header Access-Control-Allow-Origin)" "the origin is allowed"
assert_eq 200 "$(patch "$T_ANN" /v1/preferences '{"settings": {"locale": "de"}}' -H 'Origin: https://app.example')" "the browser's PATCH"
assert_eq https://app.example "$(header Access-Control-Allow-Origin)" "with its CORS header"

note "concurrent changes of one person's preferences, in opposite orders"
# 60 preferences each way: long enough for the requests to overlap
entries() { # ENABLED ORDER(sort flags)
    seq 60 | sort $2 | sed "s/.*/{\"event_type\": \"c.&\", \"channel\": \"*\", \"enabled\": $1}/" | paste -sd, -
}
ENTRIES=$(entries false -n)
REVERSED=$(entries true -rn)
CURLS=()
for i in $(seq 24); do
    if [ $((i % 2)) = 0 ]; then body="{\"preferences\": [$ENTRIES]}"; else body="{\"preferences\": [$REVERSED]}"; fi
    curl -sS --max-time 30 -o "$WORK/concurrent.$i" -w '%{http_code}' -X PATCH -H "Authorization: Bearer $KA" \
        -H 'Content-Type: application/json' --data-binary "$body" "$API/v1/preferences?user=carl" >"$WORK/concurrent.$i.status" &
    CURLS+=($!)
done
wait "${CURLS[@]}"
for i in $(seq 24); do
    assert_eq 200 "$(cat "$WORK/concurrent.$i.status")" "concurrent PATCH $i ($(cat "$WORK/concurrent.$i"))"
done
assert_eq 60 "$(sql "SELECT count(DISTINCT enabled) + count(*) - 1 FROM crier.preferences WHERE tenant = 'acme' AND recipient_id = 'carl'")" \
    "carl's 60 rows, all from one request (all true or all false)"
assert_eq 200 "$(patch "$KA" '/v1/preferences?user=carl' '{"preferences": [{"event_type": "c.1", "channel": "*", "enabled": false}, {"event_type": "c.1", "channel": "*", "enabled": true}]}')" \
    "the same preference twice in one request"
assert_eq t "$(sql "SELECT enabled FROM crier.preferences WHERE tenant = 'acme' AND recipient_id = 'carl' AND event_type = 'c.1'")" "the last one wins"

note "metrics: each route its own series"
assert_eq 200 "$(call GET /metrics)" "metrics"
grep -q '^crier_http_requests_total{route="/v1/preferences",status="200"}' "$WORK/body" || fail "GET counted: $(grep preferences "$WORK/body")"
grep -q '^crier_http_requests_total{route="PATCH /v1/preferences",status="400"}' "$WORK/body" || fail "PATCH counted: $(grep preferences "$WORK/body")"
dups=$(grep -v '^#' "$WORK/body" | sed 's/ [^ ]*$//' | sort | uniq -d)
[ -z "$dups" ] || fail "a series appears twice in /metrics: $dups"

note "the fan-out honours a preference set over HTTP"
# acme's ann: news by webhook muted (above); bob mutes billing now, by his token
assert_eq 200 "$(patch "$T_BOB" /v1/preferences '{"preferences": [{"event_type": "billing", "channel": "*", "enabled": false}]}')" \
    "bob mutes billing"
assert_eq 201 "$(as "$KA" POST /v1/events -H 'Content-Type: application/json' -d '{"type": "news", "entity_id": "n1", "payload": {}}')" "news"
assert_eq 201 "$(as "$KA" POST /v1/events -H 'Content-Type: application/json' -d '{"type": "billing", "entity_id": "b1", "payload": {}}')" "billing"
wait_for "SELECT count(*) = 4 FROM crier.deliveries WHERE state IN ('delivered', 'suppressed')" 30 "the deliveries"
assert_eq "billing:ann=delivered billing:bob=suppressed news:ann=suppressed news:bob=delivered" \
    "$(sql "SELECT string_agg(n.event_type || ':' || n.recipient_id || '=' || d.state, ' ' ORDER BY n.event_type, n.recipient_id)
            FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id")" "muted types suppressed, the rest sent"
assert_eq 2 "$(requests_at "$RECEIVER_LOG")" "two webhooks sent"

note "removing by API key"
assert_eq 200 "$(patch "$KA" '/v1/preferences?user=ann' '{"preferences": [{"event_type": "news", "channel": "webhook", "enabled": null}]}')" \
    "the API key removes ann's news mute"
assert_eq '[]' "$(json "d['preferences']")" "ann has no preference left"
assert_eq "- | Europe/Berlin,de,[]" "$(rows acme ann)" "removed from the table; the settings stay"
echo "ok"
