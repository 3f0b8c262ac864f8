#!/usr/bin/env bash
# Stored preferences: opt-outs per event type and per channel are honored when
# deliveries are written (the delivery is suppressed, with the reason), the
# most specific preference wins, required event types and rules that say
# preferences = "ignore" are delivered anyway.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "news" { payload = {} }
crier.event_type "security.alert" { payload = {}, required = true }
crier.event_type "legal.notice" { payload = {} }
local people = { "alice", "bob", "carol", "dave" }
local hook = { url = crier.setting("url") }
crier.rule "news" { recipients = people, channels = { "webhook" }, webhook = hook }
crier.rule "security.alert" { recipients = people, channels = { "webhook" }, webhook = hook }
crier.rule "legal.notice" { recipients = people, channels = { "webhook" }, webhook = hook, preferences = "ignore" }
LUA
sql "SELECT crier.set_preference('acme', 'alice', '*', 'webhook', false)" >/dev/null   # no webhooks at all
sql "SELECT crier.set_preference('acme', 'bob', 'news', '*', false)" >/dev/null        # no news
sql "SELECT crier.set_preference('acme', 'carol', '*', '*', false)" >/dev/null         # nothing ...
sql "SELECT crier.set_preference('acme', 'carol', 'news', 'webhook', true)" >/dev/null # ... but news by webhook
sql "SELECT crier.set_preference('globex', 'dave', '*', '*', false)" >/dev/null        # another tenant's dave
for t in news security.alert legal.notice; do sql "SELECT crier.emit('acme', '$t', 'x1')" >/dev/null; done
"$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" --exit-when-idle 2>"$WORK/serve.log" ||
    fail "serve: $(cat "$WORK/serve.log")"

states=$(sql "SELECT n.event_type || ':' || n.recipient_id || '=' || d.state FROM crier.deliveries d
              JOIN crier.notifications n ON n.id = d.notification_id ORDER BY 1" | tr '\n' ' ')
assert_eq "legal.notice:alice=delivered legal.notice:bob=delivered legal.notice:carol=delivered legal.notice:dave=delivered news:alice=suppressed news:bob=suppressed news:carol=delivered news:dave=delivered security.alert:alice=delivered security.alert:bob=delivered security.alert:carol=delivered security.alert:dave=delivered " \
    "$states" "deliveries by event type and recipient"
assert_eq 10 "$(requests_at "$RECEIVER_LOG")" "requests: only the deliveries not suppressed"
why=$(sql "SELECT d.last_error FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
           WHERE n.event_type = 'news' AND n.recipient_id = 'bob'")
assert_eq "suppressed by the recipient's preference (event type news, channel *)" "$why" "the reason is recorded"

# Bad input is refused and changes nothing.
if sql "SELECT crier.set_preference('acme', 'bob', 'news', 'pigeon', false)" 2>"$WORK/err"; then
    fail "an unknown channel is refused"
fi
grep -q "channel must be" "$WORK/err" || fail "the error says what is allowed: $(cat "$WORK/err")"
assert_eq 5 "$(sql "SELECT count(*) FROM crier.preferences")" "nothing changed by the refused call"
sql "SELECT crier.set_preference('acme', 'bob', 'news', '*', NULL)" >/dev/null
assert_eq 4 "$(sql "SELECT count(*) FROM crier.preferences")" "NULL removes a preference"
echo "ok"
