#!/usr/bin/env bash
# The rule author's commands: `crier check` validates rules (file:line: message,
# exit 1), `crier try` prints the plan and touches nothing.
. "$(dirname "$0")/../support/lib.sh"

out=$("$CRIER_BIN" check "$CRIER_SOURCE_DIR/examples/rules") || fail "check of the examples failed: $out"
echo "$out" | grep -q ": ok (rules version " || fail "check output: $out"

mkdir -p "$WORK/broken"
cp "$CRIER_SOURCE_DIR/examples/rules/billing.lua" "$WORK/broken/"
printf 'local crier = require "crier"\ncrier.rule "nothing.declared" {\n  recipients = {"a"},\n  channels = {"webhook"},\n  webhook = { url = "http://x" },\n}\n' \
    >"$WORK/broken/a_bad_rule.lua"
printf 'local x = = 1\n' >"$WORK/broken/b_syntax.lua"
if out=$("$CRIER_BIN" check "$WORK/broken" 2>&1); then
    fail "check of broken rules should exit non-zero"
fi
echo "$out" | grep -q "b_syntax.lua:1:" || fail "syntax error not reported as file:line: $out"
echo "$out" | grep -q "a_bad_rule.lua:2:" || fail "undeclared event type not reported as file:line: $out"

cat >"$WORK/event.json" <<'JSON'
{"tenant": "acme", "type": "invoice.created", "entity_id": "inv_42",
 "payload": {"invoice_id": "inv_42", "amount_cents": 1250, "currency": "EUR"}}
JSON
out=$("$CRIER_BIN" try "$WORK/event.json" --database "host=/nonexistent dbname=none") || fail "try failed: $out"
for want in "recipients: 3" "recipient: alice" "recipient: carol" "key: invoice.created:inv_42:alice" \
    "message id: msg_" "channel: webhook" "Invoice inv_42 for 12.50 EUR was issued"; do
    echo "$out" | grep -q "$want" || fail "try output lacks '$want': $out"
done
printf '{"tenant": "acme", "type": "invoice.created", "entity_id": "x", "payload": {"invoice_id": 1}}' >"$WORK/bad.json"
if out=$("$CRIER_BIN" try "$WORK/bad.json" 2>&1); then
    fail "try with an invalid payload should fail"
fi
echo "$out" | grep -q "invoice_id" || fail "try's validation error should name the field: $out"
printf '{not json' >"$WORK/garbage.json"
if out=$("$CRIER_BIN" try "$WORK/garbage.json" 2>&1); then
    fail "try with malformed JSON should fail"
fi
echo "$out" | grep -qi "json" || fail "try's JSON error should say so: $out"
echo "ok"
