#!/usr/bin/env bash
# The story: a batch of invoice alerts is emitted, times out half way, and the
# job runner retries the whole batch with new dedupe keys. The real daemon
# delivers to a real HTTP receiver: one alert per admin per invoice.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks

emit_batch() { # attempt from to
    for i in $(seq "$2" "$3"); do
        sql "SELECT crier.emit('acme', 'invoice.created', 'inv_$i',
             '{\"invoice_id\":\"inv_$i\",\"amount_cents\":$((i * 100)),\"currency\":\"EUR\"}', 'run/$1/inv_$i')" >/dev/null
    done
}

emit_batch 1 1 5 # attempt 1 times out after 5 of 10
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/examples/rules" --exit-when-idle --set "billing_webhook_url=$RECEIVER_URL" 2>"$WORK/serve1.log" ||
    fail "serve failed: $(cat "$WORK/serve1.log")"
emit_batch 2 1 10 # the retry of the whole batch
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/examples/rules" --exit-when-idle --set "billing_webhook_url=$RECEIVER_URL" 2>"$WORK/serve2.log" ||
    fail "serve failed: $(cat "$WORK/serve2.log")"

assert_eq 15 "$(sql "SELECT count(*) FROM crier.events WHERE state = 'done'")" "every event processed"
assert_eq 30 "$(sql "SELECT count(*) FROM crier.notifications")" "3 admins x 10 invoices"
assert_eq 30 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'")" "all delivered"
receiver_ids >"$WORK/ids"
assert_eq 30 "$(wc -l <"$WORK/ids")" "requests at the receiver"
assert_eq 30 "$(sort -u "$WORK/ids" | wc -l)" "distinct webhook-ids at the receiver"
# Every person got exactly one alert per invoice (the body names both).
dups=$(/usr/bin/python3 -c '
import json, sys, collections
c = collections.Counter()
for line in open(sys.argv[1]):
    b = json.loads(json.loads(line)["body"])
    c[(b["recipient"], b["invoice_id"])] += 1
print(sum(1 for v in c.values() if v != 1), len(c))
' "$RECEIVER_LOG")
assert_eq "0 30" "$dups" "(person, invoice) pairs with a count other than one, and pairs"
# The webhook-id is the notification key, the same one the database holds.
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                    WHERE d.message_id <> 'msg_' || replace(n.key_hash::text, '-', '')")" "message ids derive from keys"
grep -q '"webhook-id": "msg_' "$RECEIVER_LOG" || fail "webhook-id header missing"
grep -q '"idempotency-key": "msg_' "$RECEIVER_LOG" || fail "Idempotency-Key header missing"
echo "ok"
