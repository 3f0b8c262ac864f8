#!/usr/bin/env bash
# The fan-out's COPY path (crier serve --copy-min) writes exactly the rows the
# write statement does: the same events fanned out once with every batch by
# COPY (--copy-min 1) and once never by COPY give the same notifications and
# deliveries, column for column — bodies with tabs, newlines, backslashes and
# non-ASCII text, NULL fields, discriminators, retry schedules, email and
# webhook channels, an entity emitted twice in one batch (its notifications
# kept once, the first). Then, on the COPY path: a batch that meets an existing key
# runs again checked (no duplicate, nothing lost); a recipient with a stored
# preference sends the batch through the write statement, which suppresses
# that delivery; the notifications-created counter counts COPY's rows; a
# batch with a delivery on the feed channel goes through the write statement;
# a batch that meets an existing key on the write statement's path (its
# COMMIT pipelined with the write) runs again checked too.
. "$(dirname "$0")/../support/lib.sh"

RULES="$WORK/rules"
mkdir -p "$RULES"
cat >"$RULES/copy.lua" <<'LUA'
local crier = require "crier"
crier.event_type "memo" { payload = { text = "string", n = "integer" } }
crier.rule "memo" {
    recipients = function(event)
        local list = {}
        for i = 1, 3 do
            list[i] = { id = "u" .. i, email = "u" .. i .. "@example.test", name = "Nä\tme " .. i }
        end
        return list
    end,
    discriminator = function(event, recipient)
        if event.payload.n % 2 == 0 then return "even" end
    end,
    channels = { "webhook", "email" },
    webhook = {
        url = "http://127.0.0.1:9/hook",
        secret = crier.setting("copy_secret", nil),
        body = function(event, recipient)
            return { text = event.payload.text, to = recipient.id, n = event.payload.n }
        end,
        retry = { 0, "5s", "1m" },
    },
    email = {
        from = "memo@crier.test",
        subject = "Memo {{ payload.n }}",
        text = "Hello {{ recipient.name }},\n\t{{ payload.text }}\\end\r\n",
    },
}
crier.event_type "board" { payload = { text = "string" } }
crier.rule "board" { recipients = { "u1" }, channels = { "feed" }, feed = { title = "{{ payload.text }}" } }
LUA

# emit_memos FIRST LAST: one memo per n, its text full of characters COPY escapes.
emit_memos() {
    sql "SELECT count(crier.emit('acme', 'memo', 'm_' || n,
                 jsonb_build_object('n', n, 'text', E'tab\there\nline\\\\back \u00e9\u4e2d ' || n)))
         FROM generate_series($1, $2) n" >/dev/null
}

# fan_out COPY_MIN: one serve fans out whatever is pending, then exits.
fan_out() {
    "$CRIER_BIN" serve --rules "$RULES" --no-deliver --exit-when-idle --poll 0.1 --copy-min "$1" \
        >>"$WORK/serve.log" 2>&1 || fail "crier serve --copy-min $1 failed: $(tail -5 "$WORK/serve.log")"
}

# rows: every notification and delivery column that does not depend on when or
# in which order the rows were written.
rows() {
    sql "SELECT n.key, n.key_hash, n.tenant, n.event_type, n.entity_id, n.recipient_id, n.discriminator,
                n.rules_version, e.entity_id, d.channel, d.message_id, d.target, d.body, d.secret, d.subject,
                d.html, d.sender, d.retry_schedule, d.state, d.attempts, d.last_error, d.timing, d.digest_id,
                d.tenant, d.due_at = n.created_at, d.created_at = n.created_at
         FROM crier.notifications n JOIN crier.events e ON e.id = n.event_id
         LEFT JOIN crier.deliveries d ON d.notification_id = n.id
         ORDER BY n.key, d.channel"
}

# emit_twice: m_7 again under another dedupe key, in the same batch as the
# first: the same keys, so its notifications are the first one's.
emit_twice() {
    sql "SELECT crier.emit('acme', 'memo', 'm_7', '{\"n\": 7, \"text\": \"twice\"}', 'm_7-again')" >/dev/null
}

new_db
emit_memos 1 200
emit_twice
fan_out 1
grep -E "ERROR|WARN" "$WORK/serve.log" && fail "the serve logged errors (above)"
grep -q "600 notifications new (600 by COPY)" "$WORK/serve.log" ||
    fail "--copy-min 1 did not write every batch by COPY: $(grep stopped "$WORK/serve.log")"
rows >"$WORK/by_copy.txt"
assert_eq 600 "$(sql "SELECT count(*) FROM crier.notifications")" "notifications by COPY"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries WHERE body LIKE '%twice%'")" \
    "deliveries of the second m_7 (its keys were the first one's, which are kept)"
assert_eq 1200 "$(sql "SELECT count(*) FROM crier.deliveries")" "deliveries by COPY"
assert_eq 600 "$(sql "SELECT sum(value)::int FROM crier.metric_counters WHERE metric = 'crier_notifications_created_total'")" \
    "crier_notifications_created_total after COPY batches"
assert_eq "t" "$(sql 'SELECT bool_and(body::jsonb->>'"'text'"' = E'"'tab\there\nline\\\\back \u00e9\u4e2d '"' || (body::jsonb->>'"'n'"'))
                     FROM crier.deliveries WHERE channel = '"'webhook'"'')" \
    "webhook bodies keep their text: $(sql "SELECT body FROM crier.deliveries WHERE channel = 'webhook' LIMIT 1")"
assert_eq "t" "$(sql 'SELECT bool_and(body LIKE E'"'%Nä\tme %,\n\ttab%\\\\end\r\n'"') FROM crier.deliveries WHERE channel = '"'email'"'')" \
    "email bodies keep their tabs, newlines, carriage returns and backslashes: $(sql "SELECT body FROM crier.deliveries WHERE channel = 'email' LIMIT 1")"

new_db
emit_memos 1 200
emit_twice
fan_out 100000000
grep -q "600 notifications new (0 by COPY)" "$WORK/serve.log" ||
    fail "--copy-min 100000000 wrote by COPY: $(grep stopped "$WORK/serve.log")"
rows >"$WORK/by_statement.txt"
diff "$WORK/by_statement.txt" "$WORK/by_copy.txt" >"$WORK/rows.diff" ||
    fail "COPY wrote other rows than the write statement: $(head -c 2000 "$WORK/rows.diff")"
# (1,200 rows; the email bodies span several lines each)
[ "$(wc -l <"$WORK/by_copy.txt")" -ge 1200 ] || fail "expected 1200 rows to compare, got $(wc -l <"$WORK/by_copy.txt") lines"

# A key that exists: m_5 was fanned out; emitted again under another dedupe
# key, in a batch of new events, the COPY meets its key and the batch runs
# again checked.
emit_memos 201 400
sql "SELECT crier.emit('acme', 'memo', 'm_5', '{\"n\": 5, \"text\": \"again\"}', 'another-key')" >/dev/null
: >"$WORK/serve.log"
fan_out 1
grep -q "exists already" "$WORK/serve.log" || fail "the batch did not meet the existing key: $(cat "$WORK/serve.log")"
assert_eq "0" "$(sql "SELECT count(*) FROM crier.events WHERE state <> 'done'")" "events left after the checked redo"
assert_eq "1200|2400" "$(sql "SELECT (SELECT count(*) FROM crier.notifications) || '|' || (SELECT count(*) FROM crier.deliveries)")" \
    "rows after the checked redo (one notification per key)"

# A stored preference: the batch goes through the write statement, which
# suppresses u2's email for the new events and nothing else.
sql "INSERT INTO crier.preferences (tenant, recipient_id, event_type, channel, enabled)
     VALUES ('acme', 'u2', 'memo', 'email', false)" >/dev/null
emit_memos 401 600
: >"$WORK/serve.log"
fan_out 1
assert_eq "200" "$(sql "SELECT count(*) FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                        WHERE d.state = 'suppressed' AND n.recipient_id = 'u2' AND d.channel = 'email'")" \
    "u2's emails suppressed by the preference"
assert_eq "200" "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'suppressed'")" "suppressed deliveries in all"
assert_eq "1800|3600" "$(sql "SELECT (SELECT count(*) FROM crier.notifications) || '|' || (SELECT count(*) FROM crier.deliveries)")" \
    "rows after the batch with a preference"

# A feed item in a batch: the batch goes through the write statement, which
# makes feed items (COPY writes deliveries only).
sql "DELETE FROM crier.preferences" >/dev/null
emit_memos 601 650
sql "SELECT crier.emit('acme', 'board', 'b_1', '{\"text\": \"pinned\"}')" >/dev/null
: >"$WORK/serve.log"
fan_out 1
grep -q "151 notifications new (0 by COPY)" "$WORK/serve.log" ||
    fail "a batch with a feed item: $(grep stopped "$WORK/serve.log")"
assert_eq "1951|3900|1" "$(sql "SELECT (SELECT count(*) FROM crier.notifications) || '|' || (SELECT count(*) FROM crier.deliveries)
                                || '|' || (SELECT count(*) FROM crier.feed_items)")" \
    "rows after the batch with a feed item"

# A key that exists, on the write statement's path (--copy-min 100000000):
# there the COMMIT goes in the write's round trip (pipeline mode), so the
# refused write must leave the COMMIT unrun, and the batch is rolled back and
# runs again checked.
emit_memos 651 660
sql "SELECT crier.emit('acme', 'memo', 'm_7', '{\"n\": 7, \"text\": \"again\"}', 'a-third-key')" >/dev/null
: >"$WORK/serve.log"
fan_out 100000000
grep -q "exists already" "$WORK/serve.log" || fail "the write did not meet the existing key: $(cat "$WORK/serve.log")"
grep -q "30 notifications new (0 by COPY), 3 duplicates skipped" "$WORK/serve.log" ||
    fail "the checked redo on the statement path: $(grep stopped "$WORK/serve.log")"
assert_eq "0" "$(sql "SELECT count(*) FROM crier.events WHERE state <> 'done'")" "events left after the checked redo"
assert_eq "1981|3960" "$(sql "SELECT (SELECT count(*) FROM crier.notifications) || '|' || (SELECT count(*) FROM crier.deliveries)")" \
    "rows after the checked redo on the statement path"
echo "ok"
