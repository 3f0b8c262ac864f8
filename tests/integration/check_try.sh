#!/usr/bin/env bash
# The rule author's commands: `crier check` validates rules (file:line: message,
# exit 1), `crier try` prints the plan and touches nothing.
. "$(dirname "$0")/../support/lib.sh"

out=$("$CRIER_BIN" check "$CRIER_SOURCE_DIR/examples/rules") || fail "check of the examples failed: $out"
grep -q ": ok (rules version " <<<"$out" || fail "check output: $out"

mkdir -p "$WORK/broken"
cp "$CRIER_SOURCE_DIR/examples/rules/billing.lua" "$WORK/broken/"
printf 'local crier = require "crier"\ncrier.rule "nothing.declared" {\n  recipients = {"a"},\n  channels = {"webhook"},\n  webhook = { url = "http://x" },\n}\n' \
    >"$WORK/broken/a_bad_rule.lua"
printf 'local x = = 1\n' >"$WORK/broken/b_syntax.lua"
if out=$("$CRIER_BIN" check "$WORK/broken" 2>&1); then
    fail "check of broken rules should exit non-zero"
fi
grep -q "b_syntax.lua:1:" <<<"$out" || fail "syntax error not reported as file:line: $out"
grep -q "a_bad_rule.lua:2:" <<<"$out" || fail "undeclared event type not reported as file:line: $out"

# check_fails DIR PATTERN WHY: `crier check DIR` must exit 1 and print PATTERN.
check_fails() {
    local out
    if out=$("$CRIER_BIN" check "$1" 2>&1); then
        fail "check should refuse $3: $out"
    fi
    grep -qF -- "$2" <<<"$out" || fail "check reports $3 at its file:line: $out"
}

# One file cannot change what another renders: an attempt to redefine a
# built-in filter is a load error at its file:line, even inside pcall.
mkdir -p "$WORK/leak"
cat >"$WORK/leak/a.lua" <<'LUA'
local crier = require "crier"
crier.event_type "invoice.created" { payload = { amount_cents = "integer", currency = "string" } }
pcall(function() require("crier.template").filters.money = function() return "pwned" end end)
LUA
cat >"$WORK/leak/b.lua" <<'LUA'
local crier = require "crier"
crier.rule "invoice.created" {
    recipients = { "alice" }, channels = { "feed" },
    feed = { title = "{{ payload.amount_cents | money(payload.currency) }}" },
}
LUA
check_fails "$WORK/leak" "a.lua:3: rules may not change crier.template.filters.money" \
    "a file that redefines a built-in filter"
printf 'local crier = require "crier"\ncrier.event_type "invoice.created" { payload = { amount_cents = "integer", currency = "string" } }\n' \
    >"$WORK/leak/a.lua"
out=$("$CRIER_BIN" try --rules "$WORK/leak" --no-db --tenant acme --type invoice.created --entity i1 \
    --payload '{"amount_cents": 1250, "currency": "EUR"}') || fail "try of the clean rules failed: $out"
grep -q '12.50 EUR' <<<"$out" || fail "b.lua renders with the built-in money filter: $out"

# Templates are checked against the payload schema at load; a channels
# function can only be checked when it runs, and try shows its error.
mkdir -p "$WORK/authoring"
cat >"$WORK/authoring/c.lua" <<'LUA'
local crier = require "crier"
crier.event_type "comment.created" { payload = { author = "string", body = "string" } }
crier.rule "comment.created" {
    recipients = { "ann" }, channels = { "feed" },
    feed = { title = "{{ payload.autor }} commented" },
}
LUA
check_fails "$WORK/authoring" "c.lua:3: rule 'comment.created': feed.title:1: template uses payload.autor, which \
event type comment.created does not declare (declared: author, body)" "a template path the schema does not declare"
sed -i 's/payload.autor/payload.author/; s/channels = { "feed" }/channels = function() return { "feed", "sms" } end/' \
    "$WORK/authoring/c.lua"
"$CRIER_BIN" check "$WORK/authoring" >/dev/null || fail "the fixed rules should pass check"
if out=$("$CRIER_BIN" try --rules "$WORK/authoring" --no-db --tenant acme --type comment.created --entity c1 \
        --payload '{"author": "ann", "body": "hi"}' 2>&1); then
    fail "try should fail on a channels function returning an unknown channel: $out"
fi
grep -q 'channels returned unknown channel "sms" for recipient "ann" (known: email, feed, kafka, webhook)' <<<"$out" ||
    fail "try names the unknown channel and the known ones: $out"

cat >"$WORK/event.json" <<'JSON'
{"tenant": "acme", "type": "invoice.created", "entity_id": "inv_42",
 "payload": {"invoice_id": "inv_42", "amount_cents": 1250, "currency": "EUR"}}
JSON
out=$("$CRIER_BIN" try "$WORK/event.json" --database "host=/nonexistent dbname=none") || fail "try failed: $out"
for want in "recipients: 3" "recipient: alice" "recipient: carol" "key: invoice.created:inv_42:alice" \
    "message id: msg_" "channel: webhook" "Invoice inv_42 for 12.50 EUR was issued"; do
    grep -q "$want" <<<"$out" || fail "try output lacks '$want': $out"
done
printf '{"tenant": "acme", "type": "invoice.created", "entity_id": "x", "payload": {"invoice_id": 1}}' >"$WORK/bad.json"
if out=$("$CRIER_BIN" try "$WORK/bad.json" 2>&1); then
    fail "try with an invalid payload should fail"
fi
grep -q "invoice_id" <<<"$out" || fail "try's validation error should name the field: $out"
printf '{not json' >"$WORK/garbage.json"
if out=$("$CRIER_BIN" try "$WORK/garbage.json" 2>&1); then
    fail "try with malformed JSON should fail"
fi
grep -qi "json" <<<"$out" || fail "try's JSON error should say so: $out"

# Rules with a paged audience from a query, and preferences.
mkdir -p "$WORK/paged"
cat >"$WORK/paged/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "org.news" { payload = { org = "string" } }
local page = crier.query("org_page", "SELECT user_id AS id FROM app.members WHERE org = $1 AND user_id > $2 ORDER BY user_id LIMIT $3")
crier.rule "org.news" {
    recipients = crier.pages { query = page, params = function(e) return { e.payload.org } end, page_size = 2 },
    channels = { "webhook" },
    webhook = { url = "http://hooks.test/news" },
}
LUA
cat >"$WORK/news.json" <<'JSON'
{"tenant": "acme", "type": "org.news", "entity_id": "n1", "payload": {"org": "acme"},
 "queries": {"org_page": [{"id": "bo"}, {"id": "al"}, {"id": "cy"}]}}
JSON
out=$("$CRIER_BIN" try --rules "$WORK/paged" "$WORK/news.json") || fail "try with fake queries failed: $out"
grep -q "recipients: 2" <<<"$out" || fail "first page of two: $out"
grep -q "recipient: al" <<<"$out" || fail "fake rows sorted by the cursor: $out"
grep -q 'add "cursor": "bo"' <<<"$out" || fail "try says how to see the next page: $out"
if out=$("$CRIER_BIN" try --rules "$WORK/paged" --no-db --tenant acme --type org.news --entity n1 \
        --payload '{"org":"acme"}' 2>&1); then
    fail "a query without a database or fake rows should fail"
fi
grep -q 'crier.query "org_page": no database is available here' <<<"$out" || fail "the error says why: $out"

# With a database: the query runs read-only, stored preferences show, nothing changes.
new_db
sql "CREATE SCHEMA app; CREATE TABLE app.members (org text, user_id text);
     INSERT INTO app.members VALUES ('acme', 'al'), ('acme', 'bo'), ('globex', 'zed');
     GRANT USAGE ON SCHEMA app TO crier_rules; GRANT SELECT ON app.members TO crier_rules" >/dev/null
sql "SELECT crier.set_preference('acme', 'bo', 'org.news', '*', false)" >/dev/null
before=$(sql "SELECT (SELECT count(*) FROM crier.events) || '/' || (SELECT count(*) FROM crier.notifications)")
out=$("$CRIER_BIN" try --rules "$WORK/paged" --tenant acme --type org.news --entity n1 --payload '{"org":"acme"}') ||
    fail "try with a database failed: $out"
grep -q "recipient: al" <<<"$out" || fail "recipients from the database: $out"
grep -q "SUPPRESSED by the stored preference (event type org.news, channel \*)" <<<"$out" ||
    fail "the stored preference is shown: $out"
assert_eq "$before" "$(sql "SELECT (SELECT count(*) FROM crier.events) || '/' || (SELECT count(*) FROM crier.notifications)")" \
    "try changed nothing"
echo "ok"
