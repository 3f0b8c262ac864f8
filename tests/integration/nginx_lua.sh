#!/usr/bin/env bash
# The Lua library loads in nginx too: a real nginx (Debian's nginx with
# libnginx-mod-http-lua) on loopback loads the example rules through
# crier.runtime in init_by_lua, plans invoice.created events and renders
# templates on request; the responses, the rules version (the same as the C
# core's) and a clean error log are checked. Needs no database.
. "$(dirname "$0")/../support/lib.sh"
. "$CRIER_SOURCE_DIR/tests/support/nginx/nginx.sh"

expect() { # STATUS BODY WHAT
    assert_eq "$1" "$STATUS" "$3: status"
    assert_eq "$2" "$BODY" "$3: body"
}

start_nginx "$NGINX_SUPPORT/nginx.conf.in"

# The library and the rules loaded, with the C core's rules version.
version=$("$CRIER_BIN" check "$CRIER_SOURCE_DIR/examples/rules" 2>/dev/null | sed -n 's/.*(rules version \([0-9a-f]*\)).*/\1/p')
[ ${#version} = 12 ] || fail "no rules version from crier check"
get /rules
[ "$STATUS" = 200 ] || fail "/rules: $STATUS $BODY"
full=$(echo "$BODY" | sed -n 's/.*"version":"\([0-9a-f]*\)".*/\1/p')
assert_eq "$version" "${full:0:12}" "rules version in nginx vs crier check"
assert_eq 64 "${#full}" "rules version length"
grep -q '"event_types":\["build.failed","comment.created","invoice.created","invoice.overdue","invoice.paid","mention.created","org.announcement","security.alert","team.daily"\],"files":\["announcements.lua","billing.lua","collaboration.lua"\],"lua":"LuaJIT 2\.1' <<<"$BODY" ||
    fail "/rules: $BODY"
get "/rules?fresh=1" # a generation loaded inside a request (what a hot reload would do)
if [ "$STATUS" != 200 ] || ! grep -q "\"version\":\"$full\"" <<<"$BODY"; then
    fail "/rules?fresh=1: $STATUS $BODY"
fi

hook='"url":"http://127.0.0.1:9/hooks/billing"'
body() { # RECIPIENT TENANT
    echo "{\"body\":{\"amount_cents\":1250,\"currency\":\"EUR\",\"invoice_id\":\"inv_1\",\"recipient\":\"$1\",\"tenant\":\"$2\",\"text\":\"Invoice inv_1 for 12.50 EUR was issued\",\"type\":\"invoice.created\"},\"channel\":\"webhook\",\"recipient\":\"$1\",$hook}"
}

get "/plan?tenant=acme&entity=inv_1&amount=1250"
expect 200 "{\"deliveries\":[$(body alice acme),$(body bob acme),$(body carol acme)],\"recipients\":[\"alice\",\"bob\",\"carol\"],\"version\":\"$full\"}" \
    "plan for acme"
get "/plan?tenant=globex&entity=inv_1&amount=1250"
expect 200 "{\"deliveries\":[$(body dave globex),$(body erin globex)],\"recipients\":[\"dave\",\"erin\"],\"version\":\"$full\"}" \
    "plan for globex"
get "/plan?tenant=initech&entity=inv_1&amount=1250"
expect 200 "{\"deliveries\":[],\"recipients\":[],\"version\":\"$full\"}" "plan for a tenant without admins"
get "/plan?tenant=acme&entity=inv_2&amount=-5&currency=USD"
grep -q '"text":"Invoice inv_2 for -0.05 USD was issued"' <<<"$BODY" || fail "negative amount: $BODY"
# Hostile ids are data: stored literally in the JSON body, never interpreted.
get /plan --get --data-urlencode 'tenant=acme' --data-urlencode "entity=inv\"</x>'; DROP TABLE x;--" \
    --data-urlencode amount=1
grep -qF '"text":"Invoice inv\"</x>'"'"'; DROP TABLE x;-- for 0.01 EUR was issued"' <<<"$BODY" ||
    fail "hostile entity id: $BODY"

# The library's refusals, with its own messages.
get "/plan?tenant=acme&entity=inv_1&amount=1250&type=invoice.deleted"
expect 400 '{"error":{"code":"unknown_event_type","message":"unknown event type \"invoice.deleted\""}}' \
    "unknown event type"
get "/plan?tenant=acme&entity=inv_1&amount=12.5"
expect 400 '{"error":{"code":"invalid_payload","message":"invoice.created: payload field '"'amount_cents'"' must be an integer, got number"}}' \
    "fractional amount"
get "/plan?tenant=acme&entity=inv_1"
expect 400 '{"error":{"code":"invalid_payload","message":"invoice.created: payload field '"'amount_cents'"' is required (an integer)"}}' \
    "missing amount"

# Templates: HTML escaping of hostile values, defaults, errors.
get /render --get --data-urlencode 'name=<script>alert("x&y")</script>' --data-urlencode "plan=pro'"
expect 200 '<p>Hello &lt;script&gt;alert(&quot;x&amp;y&quot;)&lt;/script&gt;, your plan is pro&#39;.</p>' "html escaping"
get "/render?name=Zoe"
expect 200 '<p>Hello Zoe, your plan is free.</p>' "default filter"
get /render
expect 400 "{\"error\":{\"code\":\"template_error\",\"message\":\"greeting:1: 'user.name' is missing (column 13); add | default('...') to allow that\"}}" \
    "missing value"
get "/render?html=1&who=%3Cb%3E" --data-binary 'Hi {{ args.who }} {{ '"'{{'"' }}'
expect 200 'Hi &lt;b&gt; {{' "posted HTML template"
get "/render?who=%3Cb%3E" --data-binary 'Hi {{ args.who }}'
expect 200 'Hi <b>' "posted text template (not escaped)"
get "/render" --data-binary $'line one\nHi {{ args.who'
expect 400 "{\"error\":{\"code\":\"template_error\",\"message\":\"posted:2: unterminated '{{' (column 4); missing '}}'\"}}" \
    "template syntax error"
get "/render" -X POST # no body: template.compile raises, the handler answers 500 with the message
if [ "$STATUS" != 500 ] || ! grep -q "template.compile: source must be a string, got nil" <<<"$BODY"; then
    fail "raised error: $STATUS $BODY"
fi

stop_nginx

# No Lua errors or global-variable warnings in nginx's log, and the module
# really ran (the workers started).
if grep -E '\[(alert|crit|error|emerg)\]|lua entry thread aborted|writing a global Lua variable|init_by_lua error' \
    "$NGINX_DIR/error.log"; then
    fail "nginx logged errors (above)"
fi
grep -q "start worker process" "$NGINX_DIR/error.log" || fail "no worker start in the error log: $(cat "$NGINX_DIR/error.log")"
echo "ok"
