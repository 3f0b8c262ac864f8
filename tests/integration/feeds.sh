#!/usr/bin/env bash
# Feeds: write-mode feed items per recipient and read-mode audience items
# merged into one feed, membership windows, states and counts computed from
# the items, and the exact mark-all-read: a notification whose transaction was
# still open when the person marked all read stays unread.
. "$(dirname "$0")/../support/lib.sh"
new_db
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "comment.created" { payload = { author = "string", text = "string", to = "array" } }
crier.event_type "release.published" { payload = { version = "string" } }
crier.rule "comment.created" {
    recipients = function(event) return event.payload.to end,
    channels = { "feed" },
    feed = { title = "{{ payload.author }} commented", body = "{{ payload.text }}" },
}
crier.rule "release.published" {
    mode = "read",
    audience = "team:core",
    feed = { title = "Release {{ payload.version }}" },
}
LUA
serve_once() {
    "$CRIER_BIN" serve --rules "$WORK/rules" --exit-when-idle 2>"$WORK/serve.log" || fail "serve: $(cat "$WORK/serve.log")"
}
emit() { sql "SELECT crier.emit('acme', '$1', '$2', '$3')" >/dev/null; }
feed_of() { # person -> "title:read" lines, newest first
    sql "SELECT content->>'title' || ':' || read FROM crier.feed('acme', '$1', NULL, 50) ORDER BY id DESC" | tr '\n' ' '
}

sql "SELECT crier.join_audience('acme', 'team:core', 'ann')" >/dev/null
emit release.published r1 '{"version": "1.0"}'
serve_once
sql "SELECT crier.join_audience('acme', 'team:core', 'bob')" >/dev/null # joins after 1.0
emit comment.created c1 '{"author": "cy", "text": "<b>hi</b>", "to": ["ann", "bob"]}'
serve_once # (items written in one batch share no order: process them one by one)
emit release.published r2 '{"version": "2.0"}'
serve_once
assert_eq "Release 2.0:false cy commented:false Release 1.0:false " "$(feed_of ann)" "ann's merged feed"
assert_eq "Release 2.0:false cy commented:false " "$(feed_of bob)" "bob sees releases from when he joined"
assert_eq "" "$(feed_of zed)" "someone else's feed is empty"
assert_eq "" "$(sql "SELECT content->>'title' FROM crier.feed('globex', 'ann', NULL, 50)")" "another tenant's ann"
assert_eq '<b>hi</b>' "$(sql "SELECT content->>'body' FROM crier.feed('acme', 'ann', NULL, 50) WHERE kind = 'direct'")" \
    "content stored literally (escaping is the reader's job)"
assert_eq "3|3" "$(sql "SELECT unread || '|' || unseen FROM crier.feed_counts('acme', 'ann')")" "ann's counts"

# The same through crier feed (the CLI over the same SQL functions).
out=$("$CRIER_BIN" feed counts --tenant acme --user ann) || fail "crier feed counts: $out"
assert_eq "unread: 3
unseen: 3" "$out" "crier feed counts"
assert_eq 3 "$("$CRIER_BIN" feed list --tenant acme --user ann | grep -c 'read=f')" "crier feed list"
if "$CRIER_BIN" feed mark 999999 read --tenant acme --user ann 2>"$WORK/mark.err"; then
    fail "marking an item the person does not have should fail"
fi
grep -q "nothing changed" "$WORK/mark.err" || fail "the error says so: $(cat "$WORK/mark.err")"
if "$CRIER_BIN" feed list --tenant acme 2>/dev/null; then fail "--user is required"; fi
top=$("$CRIER_BIN" feed list --tenant acme --user ann --limit 1 | cut -d' ' -f1)
"$CRIER_BIN" feed mark "$top" read --tenant acme --user ann >/dev/null || fail "crier feed mark read"
assert_eq "unread: 2" "$("$CRIER_BIN" feed counts --tenant acme --user ann | head -1)" "after crier feed mark"
"$CRIER_BIN" feed mark "$top" unread --tenant acme --user ann >/dev/null || fail "crier feed mark unread"
"$CRIER_BIN" feed mark "$top" unseen --tenant acme --user ann >/dev/null || fail "crier feed mark unseen"

# Keyset pagination: pages of 2, no duplicates, no gaps.
first=$(sql "SELECT string_agg(id::text, ',' ORDER BY id DESC) FROM crier.feed('acme', 'ann', NULL, 2)")
last=${first##*,}
second=$(sql "SELECT string_agg(id::text, ',' ORDER BY id DESC) FROM crier.feed('acme', 'ann', $last, 2)")
all=$(sql "SELECT string_agg(id::text, ',' ORDER BY id DESC) FROM crier.feed('acme', 'ann', NULL, 10)")
assert_eq "$all" "$first,$second" "two pages make the whole feed"

# The exact mark-all-read. A transaction inserts a notification for ann and
# stays open; another commits; ann marks all read; the first commits.
nid() { sql "INSERT INTO crier.notifications (key_hash, key, tenant, event_id, event_type, entity_id, recipient_id)
             SELECT gen_random_uuid(), '$1', 'acme', min(id), 'comment.created', '$1', 'ann' FROM crier.events
             RETURNING id"; }
late=$(nid late)
early=$(nid early)
( psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 <<SQL
BEGIN;
INSERT INTO crier.feed_items (tenant, recipient_id, notification_id, event_type, content)
VALUES ('acme', 'ann', $late, 'comment.created', '{"title": "late"}');
SELECT pg_sleep(2);
COMMIT;
SQL
) >/dev/null &
late_pid=$!
sleep 0.5
sql "INSERT INTO crier.feed_items (tenant, recipient_id, notification_id, event_type, content)
     VALUES ('acme', 'ann', $early, 'comment.created', '{\"title\": \"early\"}')" >/dev/null
sql "SELECT crier.feed_mark_all('acme', 'ann', 'read')" >/dev/null
wait "$late_pid" || fail "the late transaction failed"
assert_eq "f" "$(sql "SELECT read FROM crier.feed('acme', 'ann', NULL, 50) WHERE content->>'title' = 'late'")" \
    "a notification committed after mark-all-read, begun before it, stays unread"
assert_eq "t" "$(sql "SELECT read FROM crier.feed('acme', 'ann', NULL, 50) WHERE content->>'title' = 'early'")" \
    "a notification committed before mark-all-read is read"
# (a created_at watermark would have hidden it: the late item's created_at is before the click)
assert_eq "t" "$(sql "SELECT f.created_at < w.read_at FROM crier.feed_items f, crier.feed_watermarks w
                      WHERE f.content->>'title' = 'late' AND w.recipient_id = 'ann'")" "the late item's timestamp is older"
assert_eq "1|1" "$(sql "SELECT unread || '|' || unseen FROM crier.feed_counts('acme', 'ann')")" "counts after mark-all-read"

# Marking one item works below and above the watermark; the watermark never
# moves backwards (a later mark up to an older cursor keeps what was read).
late_item=$(sql "SELECT id FROM crier.feed_items WHERE content->>'title' = 'late'")
early_item=$(sql "SELECT id FROM crier.feed_items WHERE content->>'title' = 'early'")
assert_eq t "$(sql "SELECT crier.feed_mark('acme', 'ann', $late_item, 'read', true)")" "mark one above the watermark"
assert_eq "0|0" "$(sql "SELECT unread || '|' || unseen FROM crier.feed_counts('acme', 'ann')")" "all read"
assert_eq t "$(sql "SELECT crier.feed_mark('acme', 'ann', $early_item, 'read', false)")" "mark one below unread"
assert_eq "f" "$(sql "SELECT read FROM crier.feed('acme', 'ann', NULL, 50) WHERE id = $early_item")" \
    "an explicit unread below the watermark"
oldest=$(sql "SELECT min(id) FROM crier.feed('acme', 'ann', NULL, 50)")
sql "SELECT crier.feed_mark_all('acme', 'ann', 'read', $oldest)" >/dev/null
assert_eq "0" "$(sql "SELECT count(*) FROM crier.feed('acme', 'ann', NULL, 50) WHERE NOT read AND id <> $early_item")" \
    "marking up to an older cursor un-reads nothing"
assert_eq t "$(sql "SELECT crier.feed_mark('acme', 'ann', $late_item, 'archived', true)")" "archive"
assert_eq 4 "$(sql "SELECT count(*) FROM crier.feed('acme', 'ann', NULL, 50)")" "archived items leave the feed"
assert_eq f "$(sql "SELECT crier.feed_mark('acme', 'bob', $late_item, 'read', true)")" "bob cannot mark ann's item"
assert_eq f "$(sql "SELECT crier.feed_mark('globex', 'ann', $early_item, 'read', true)")" "nor can another tenant"

# Counts equal the feed itself after a concurrent workload of inserts and marks.
for w in 1 2 3 4; do
    ( for i in $(seq 15); do
        stmt="WITH n AS (INSERT INTO crier.notifications (key_hash, key, tenant, event_id, event_type, entity_id,
                  recipient_id) SELECT gen_random_uuid(), 'w$w-$i', 'acme', min(id), 'comment.created', 'w$w-$i', 'ann'
                  FROM crier.events RETURNING id)
              INSERT INTO crier.feed_items (tenant, recipient_id, notification_id, event_type, content)
              SELECT 'acme', 'ann', n.id, 'comment.created', '{\"title\": \"w$w-$i\"}' FROM n;"
        [ $((i % 4)) = 0 ] && stmt="$stmt SELECT crier.feed_mark_all('acme', 'ann', 'read');"
        [ $((i % 3)) = 0 ] && stmt="$stmt SELECT crier.feed_mark('acme', 'ann', (SELECT max(id) FROM crier.feed_items), 'seen', true);"
        psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 -c "$stmt" >/dev/null || exit 1
      done ) &
done
wait
assert_eq "$(sql "SELECT count(*) FILTER (WHERE NOT read) || '|' || count(*) FILTER (WHERE NOT seen)
                  FROM crier.feed('acme', 'ann', NULL, 10000)")" \
    "$(sql "SELECT unread || '|' || unseen FROM crier.feed_counts('acme', 'ann')")" "counts match the feed"
echo "ok"
