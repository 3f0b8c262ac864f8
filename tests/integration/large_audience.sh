#!/usr/bin/env bash
# A large audience (crier.pages over a read-only query): 200,000 members
# (AUDIENCE to change it) are fanned out one page per batch — each page in its
# own transaction with the cursor committed beside it — so a kill -9 halfway
# keeps the pages written and a restart continues without duplicates, while
# other traffic keeps flowing. Prints the workers' peak RSS.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
N=${AUDIENCE:-200000}
sql "CREATE SCHEMA app; CREATE TABLE app.members (org text NOT NULL, user_id text NOT NULL, PRIMARY KEY (org, user_id));
     INSERT INTO app.members SELECT 'acme', 'u' || lpad(i::text, 8, '0') FROM generate_series(1, $N) AS i;
     INSERT INTO app.members SELECT 'globex', 'g' || i FROM generate_series(1, 10) AS i;
     ANALYZE app.members;
     GRANT USAGE ON SCHEMA app TO crier_rules; GRANT SELECT ON app.members TO crier_rules" >/dev/null
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "org.announcement" { payload = { org = "string" } }
crier.event_type "ping" { payload = {} }
local page = crier.query("org_members_page", [[
    SELECT user_id AS id FROM app.members WHERE org = $1 AND user_id > $2 ORDER BY user_id LIMIT $3]])
crier.rule "org.announcement" {
    recipients = crier.pages {
        query = page,
        params = function(event) return { event.payload.org } end,
        page_size = 1000,
    },
    channels = {},
}
crier.rule "ping" { recipients = { "ops" }, channels = { "webhook" }, webhook = { url = crier.setting("url") } }
LUA
serve() { # name
    "$CRIER_BIN" serve --rules "$WORK/rules" --set "url=$RECEIVER_URL" --batch-size 50 >"$WORK/$1.log" 2>&1 &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
}
peak_rss_kb() { awk '/VmHWM/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

sql "SELECT crier.emit('acme', 'org.announcement', 'ann-1', '{\"org\": \"acme\"}')" >/dev/null
serve victim
victim=$SERVE_PID
sql "SELECT count(crier.emit('acme', 'ping', 'p' || i)) FROM generate_series(1, 20) AS i" >/dev/null
wait_for "SELECT count(*) >= $((N / 3)) FROM crier.notifications WHERE event_type = 'org.announcement'" 120 \
    "the first third of the audience"
rss1=$(peak_rss_kb "$victim")
kill -9 "$victim"
wait "$victim" 2>/dev/null || true
kept=$(sql "SELECT count(*) FROM crier.notifications WHERE event_type = 'org.announcement'")
pages=$(sql "SELECT pages FROM crier.events WHERE entity_id = 'ann-1'")
note "killed after $kept notifications ($pages pages committed; worker peak RSS ${rss1} kB)"
[ "$pages" -ge 2 ] || fail "the audience is written in pages, each committed ($pages)"
assert_eq "$((pages * 1000))" "$kept" "every committed page is whole, nothing half-written"
assert_eq 20 "$(sql "SELECT count(*) FROM crier.events WHERE event_type = 'ping' AND state = 'done'")" \
    "other traffic flowed beside the audience"

serve survivor
wait_for "SELECT state = 'done' FROM crier.events WHERE entity_id = 'ann-1'" 300 "the audience finished after the restart"
rss2=$(peak_rss_kb "$SERVE_PID")
stop_serve
assert_eq "$N" "$(sql "SELECT count(*) FROM crier.notifications WHERE event_type = 'org.announcement'")" \
    "one notification per member"
assert_eq "$N" "$(sql "SELECT count(DISTINCT recipient_id) FROM crier.notifications WHERE event_type = 'org.announcement'")" \
    "distinct members"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.notifications WHERE recipient_id LIKE 'g%'")" "only the org's members"
assert_eq "$((N / 1000 + 1))" "$(sql "SELECT pages FROM crier.events WHERE entity_id = 'ann-1'")" \
    "pages (the last one finds no more rows)"
note "peak RSS of the workers: ${rss1} kB (killed) and ${rss2} kB (finished the audience of $N)"
echo "ok"
