#!/usr/bin/env bash
# Rules in nginx, reloaded without `nginx -s reload`: two workers load the
# listed rules directory (the same version as crier check); a file added,
# then edited, is picked up by every worker (the shared dict shows each
# worker's version); a broken edit is refused — logged with file:line — and
# every worker keeps the old version; a deploy by rename is safe. Rules'
# crier.query runs in nginx as crier_rules in a read-only transaction: it
# reads what was granted, and is refused crier's secrets, ungranted tables
# and writes; many concurrent plans that query (each yielding to the others)
# all get their own answer.
. "$(dirname "$0")/../support/lib.sh"
. "$CRIER_SOURCE_DIR/tests/support/nginx/nginx.sh"

new_db
sql "CREATE SCHEMA app;
     CREATE TABLE app.members (org text, user_id text);
     INSERT INTO app.members SELECT 'org' || o, 'u' || o || '_' || u FROM generate_series(1, 20) o, generate_series(1, 3) u;
     CREATE TABLE app.payroll (user_id text, salary int);
     GRANT USAGE ON SCHEMA app TO crier_rules; GRANT SELECT ON app.members TO crier_rules" >/dev/null

RULES_DIR="$WORK/rules"
mkdir -p "$RULES_DIR"
cat >"$RULES_DIR/a.lua" <<'LUA'
local crier = require "crier"
local probes = {
    members = "SELECT user_id FROM app.members WHERE org = $1 ORDER BY user_id",
    secret = "SELECT secret::text AS user_id FROM crier.api_tenants WHERE tenant = $1",
    ungranted = "SELECT user_id FROM app.payroll WHERE $1::text IS NOT NULL",
    write = "WITH w AS (INSERT INTO app.members VALUES ($1, 'x') RETURNING user_id) SELECT user_id FROM w",
}
for name, text in pairs(probes) do
    local q = crier.query("probe_" .. name, text)
    crier.event_type("probe." .. name) { payload = {} }
    crier.rule("probe." .. name) {
        recipients = function(event)
            local ids = {}
            for _, row in ipairs(q(event.tenant)) do
                ids[#ids + 1] = row.user_id
            end
            return ids
        end,
        channels = { "feed" },
        feed = { title = "probe" },
    }
end
LUA
version_of() { # the rules version crier check prints (12 hex digits)
    "$CRIER_BIN" check "$RULES_DIR" 2>/dev/null | sed -n 's/.*(rules version \([0-9a-f]*\)).*/\1/p'
}
# workers_at VERSION: true when the shared dict shows every worker at VERSION.
workers_at() {
    get /rules
    /usr/bin/python3 -c '
import json, sys
status = json.loads(sys.argv[1])
versions = [v[:12] for v in status["workers"].values()]
sys.exit(0 if len(versions) == int(sys.argv[3]) and set(versions) == {sys.argv[2]} else 1)' "$BODY" "$1" 2
}
wait_workers_at() { # VERSION WHAT
    for _ in $(seq 50); do
        workers_at "$1" && return 0
        sleep 0.1
    done
    fail "$2: the workers did not all reach $1: $BODY"
}

NGINX_WORKER_COUNT=2 start_nginx "$NGINX_SUPPORT/openresty.conf.in"
[ "$(echo $NGINX_WORKERS | wc -w)" = 2 ] || fail "expected two workers, got: $NGINX_WORKERS"
v1=$(version_of)
[ ${#v1} = 12 ] || fail "no version from crier check"
wait_workers_at "$v1" "start"

# --- crier.query in nginx, as crier_rules, read-only ------------------------
get "/plan?type=probe.members&tenant=org7"
assert_eq 200 "$STATUS" "a rule that queries: $BODY"
assert_eq '["u7_1","u7_2","u7_3"]' "$(json_field "$BODY" recipients)" "the granted rows"
get "/plan?type=probe.secret&tenant=acme"
assert_eq 500 "$STATUS" "crier's secrets: $BODY"
grep -q "permission denied for schema crier" <<<"$BODY" || fail "crier's secrets: $BODY"
get "/plan?type=probe.ungranted&tenant=acme"
grep -q "permission denied for table payroll" <<<"$BODY" || fail "an ungranted table: $BODY"
get "/plan?type=probe.write&tenant=acme"
grep -q "read-only transaction" <<<"$BODY" || fail "a write: $BODY"
assert_eq 60 "$(sql "SELECT count(*) FROM app.members")" "nothing written"
assert_eq 0 "$(sql "SELECT count(*) FROM pg_stat_activity WHERE usename = 'crier' AND application_name = 'crier rules' AND datname = current_database()")" \
    "no rule query ran as crier's own role"
# Concurrent plans, each yielding while it waits for its query.
curls=()
for o in $(seq 20); do
    curl -s "$BASE/plan?type=probe.members&tenant=org$o" >"$WORK/plan.$o" &
    curls+=($!)
done
wait "${curls[@]}"
for o in $(seq 20); do
    assert_eq "[\"u${o}_1\",\"u${o}_2\",\"u${o}_3\"]" "$(json_field "$(cat "$WORK/plan.$o")" recipients)" \
        "concurrent plan $o: $(cat "$WORK/plan.$o")"
done

# --- A file added: every worker swaps --------------------------------------
cat >"$RULES_DIR/b.lua" <<'LUA'
local crier = require "crier"
crier.event_type "pong" {}
crier.rule "pong" { recipients = { "first" }, channels = { "feed" }, feed = { title = "pong" } }
LUA
v2=$(version_of)
[ "$v2" != "$v1" ] || fail "adding a file did not change the version"
wait_workers_at "$v2" "a file added"
for _ in 1 2 3 4; do # both workers answer with the new rules
    get "/plan?type=pong"
    assert_eq '["first"]' "$(json_field "$BODY" recipients)" "pong after the add: $BODY"
done

# --- An edit (deployed by rename): every worker swaps -----------------------
sed 's/"first"/"second"/' "$RULES_DIR/b.lua" >"$RULES_DIR/.b.lua.tmp"
mv "$RULES_DIR/.b.lua.tmp" "$RULES_DIR/b.lua"
v3=$(version_of)
wait_workers_at "$v3" "an edit"
get "/plan?type=pong"
assert_eq '["second"]' "$(json_field "$BODY" recipients)" "pong after the edit: $BODY"

# --- A broken edit: refused, logged with file:line, the old version kept ----
cp "$RULES_DIR/b.lua" "$WORK/b.good"
printf 'local crier = require "crier"\ncrier.event_type "pong" {}\ncrier.rule "pong" { recipients = { "third" }\n' \
    >"$RULES_DIR/b.lua"
sleep 1
workers_at "$v3" || fail "a broken edit changed a worker's version: $BODY"
assert_eq "$v3" "$(json_field "$BODY" version | cut -c1-12)" "this worker's version"
json_field "$BODY" refused error | grep -q "b.lua:[0-9]" || fail "the refusal names file:line: $BODY"
get "/plan?type=pong"
assert_eq '["second"]' "$(json_field "$BODY" recipients)" "pong still runs the old version: $BODY"
[ "$(grep -c "crier: rules version .* refused; still running $v3" "$NGINX_DIR/error.log")" = 2 ] ||
    fail "each worker logs the refusal once: $(grep refused "$NGINX_DIR/error.log")"
grep -q "b.lua:[0-9]*:" "$NGINX_DIR/error.log" || fail "the log names file:line"
# A rule that fails at load time (not a syntax error) is refused the same way.
printf 'local crier = require "crier"\ncrier.rule "nope" { recipients = {}, channels = { "feed" }, feed = { title = "x" } }\n' \
    >"$RULES_DIR/b.lua"
sleep 1
workers_at "$v3" || fail "a rule for an undeclared type changed a worker's version: $BODY"
# Fixed: picked up again.
cp "$WORK/b.good" "$RULES_DIR/b.lua"
touch "$RULES_DIR/c.lua"
v4=$(version_of)
wait_workers_at "$v4" "the fix"

stop_nginx
ALLOWED_LOG_ERRORS='crier: rules version [0-9a-f]+ refused' nginx_log_clean
echo "ok"
