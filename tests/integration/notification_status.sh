#!/usr/bin/env bash
# A notification's status accounts for every channel, the in-app feed
# included: a person whose webhook is muted but who got the feed item was
# reached (delivered); one who muted the feed and got nothing was not
# (suppressed), nor was one whose rule gave no channel.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "both" { payload = {} }
crier.event_type "feed.only" { payload = {} }
crier.event_type "silent" { payload = {} }
local people = { "ann", "bob", "cy", "dee" }
crier.rule "both" {
    recipients = people, channels = { "webhook", "feed" },
    webhook = { url = crier.setting("url") }, feed = { title = "both" },
}
crier.rule "feed.only" { recipients = people, channels = { "feed" }, feed = { title = "feed only" } }
crier.rule "silent" { recipients = { "ann" }, channels = {} }
LUA
sql "SELECT crier.set_preference('acme', 'ann', '*', 'webhook', false)" >/dev/null # feed only
sql "SELECT crier.set_preference('acme', 'bob', '*', 'feed', false)" >/dev/null    # webhook only
sql "SELECT crier.set_preference('acme', 'cy', '*', '*', false)" >/dev/null        # nothing
for t in both feed.only silent; do sql "SELECT crier.emit('acme', '$t', 'x1')" >/dev/null; done
"$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" --exit-when-idle 2>"$WORK/serve.log" ||
    fail "serve: $(cat "$WORK/serve.log")"
status() { # type recipient: the status the API shows (GET /v1/notifications/{id} runs crier.api_notification)
    sql "SELECT crier.api_notification('acme', n.id)->>'status' FROM crier.notifications n
         WHERE n.event_type = '$1' AND n.recipient_id = '$2'"
}
assert_eq delivered "$(status both ann)" "webhook muted, feed item there"
assert_eq delivered "$(status both bob)" "feed muted, webhook delivered"
assert_eq suppressed "$(status both cy)" "everything muted"
assert_eq delivered "$(status both dee)" "both channels"
assert_eq delivered "$(status feed.only ann)" "the feed item is the delivery"
assert_eq suppressed "$(status feed.only bob)" "feed muted, nothing else: nothing reached bob"
assert_eq suppressed "$(status silent ann)" "no channel"
echo ok
