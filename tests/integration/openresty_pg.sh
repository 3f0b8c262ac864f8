#!/usr/bin/env bash
# crier.pg, the cosocket PostgreSQL client, inside a real nginx against real
# PostgreSQL: trust, md5 and scram-sha-256 authentication against a cluster
# of this test's own configured for each (and wrong passwords refused);
# parameters with hostile strings stored and read back literally; errors
# with their SQLSTATE and the connection usable after them; a backend killed
# mid-query gives nil, err (a 500 with the message, not a hung or crashed
# worker) and the pool recovers; PostgreSQL gone gives a quick 503.
. "$(dirname "$0")/../support/lib.sh"
. "$CRIER_SOURCE_DIR/tests/support/nginx/nginx.sh"

new_db
sql "CREATE SCHEMA app; CREATE TABLE app.strings (id bigserial PRIMARY KEY, v text)" >/dev/null
RULES_DIR="$WORK/rules"
mkdir -p "$RULES_DIR"
echo 'require("crier").event_type "ping" {}' >"$RULES_DIR/ping.lua"
start_nginx "$NGINX_SUPPORT/openresty.conf.in"

# --- Parameters and types -------------------------------------------------
hostile="x'); DROP TABLE app.strings; -- \"\\ {{ payload }} \$1 <script> é ☃"
get /pg/echo --get --data-urlencode "v=$hostile"
assert_eq 200 "$STATUS" "echo: $BODY"
assert_eq "$hostile" "$(json_field "$BODY" v)" "a hostile string as a parameter"
assert_eq 42 "$(json_field "$BODY" n)" "int decoded"
assert_eq true "$(json_field "$BODY" b)" "bool decoded"
assert_eq "$hostile" "$(json_field "$BODY" j k)" "jsonb decoded"
for v in "$hostile" "Robert'); DROP TABLE app.strings;--" $'line\nbreak\ttab' "%s%n%x"; do
    get /pg/store --data-binary "$v"
    assert_eq 200 "$STATUS" "store: $BODY"
    id=$(json_field "$BODY" id)
    assert_eq "$v" "$(sql "SELECT v FROM app.strings WHERE id = $id")" "stored literally"
done
assert_eq 4 "$(sql "SELECT count(*) FROM app.strings")" "the table is still there, with 4 rows"

# --- Errors carry SQLSTATE; the connection is usable after one ------------
for case in syntax:42601 unique:23505 division:22012 params:22P02; do
    get "/pg/error?q=${case%%:*}"
    assert_eq "${case#*:}" "$(json_field "$BODY" sqlstate)" "SQLSTATE of ${case%%:*}: $BODY"
    grep -q "SQLSTATE ${case#*:}" <<<"$BODY" || fail "the error text names its SQLSTATE: $BODY"
    assert_eq 1 "$(json_field "$BODY" after)" "a query after the error (${case%%:*})"
done

# --- A backend killed mid-query: nil, err; the pool recovers ----------------
curl -s -o "$WORK/killed" -w '%{http_code}' "$BASE/pg/sleep?s=20" >"$WORK/killed.status" &
curl_pid=$!
for _ in $(seq 50); do
    victim=$(sql "SELECT pid FROM pg_stat_activity WHERE application_name = 'crier nginx'
                   AND query LIKE '%pg_sleep%' AND state = 'active'")
    [ -n "$victim" ] && break
    sleep 0.1
done
[ -n "$victim" ] || fail "the sleeping query never showed up in pg_stat_activity"
sql "SELECT pg_terminate_backend($victim)" >/dev/null
wait "$curl_pid" || true
assert_eq 500 "$(cat "$WORK/killed.status")" "a killed backend: status ($(cat "$WORK/killed"))"
grep -q '"err":"reading from PostgreSQL' "$WORK/killed" || grep -q '57P01' "$WORK/killed" ||
    fail "a killed backend: $(cat "$WORK/killed")"
grep -q '"state":"broken"' "$WORK/killed" || fail "the connection is marked broken: $(cat "$WORK/killed")"
# Pooled connections killed while idle are dropped by the pool, not handed out.
get /pg/pid
assert_eq 200 "$STATUS" "after the kill: $BODY"
pid1=$(json_field "$BODY" pid)
get /pg/pid
assert_eq "$pid1" "$(json_field "$BODY" pid)" "the pool hands back the same backend"
assert_eq true "$(json_field "$BODY" reused)" "a reused connection"
sql "SELECT pg_terminate_backend($pid1)" >/dev/null
sleep 0.3
get /pg/pid
assert_eq 200 "$STATUS" "after an idle pooled backend was killed: $BODY"
[ "$(json_field "$BODY" pid)" != "$pid1" ] || fail "the killed backend was handed out again"
for _ in $(seq 5); do
    get /pg/echo?v=ok
    assert_eq 200 "$STATUS" "queries after the kills: $BODY"
done

# --- Authentication: a cluster of this test's own, one role per method ------
PGA="$WORK/pg-auth"
"$CRIER_BIN" cluster start --fast "$PGA" >/dev/null
PIDS+=() # stopped below and by the trap
trap 'stop_nginx; "$CRIER_BIN" cluster stop "$PGA" >/dev/null 2>&1 || true; cleanup' EXIT
AUTH_URL=$("$CRIER_BIN" cluster url "$PGA")
AUTH_HOST=$(echo "$AUTH_URL" | sed -n 's/.*host=\([^ ]*\).*/\1/p')
AUTH_PORT=$(echo "$AUTH_URL" | sed -n 's/.*port=\([^ ]*\).*/\1/p')
psql -XAtq "$AUTH_URL" -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE ROLE u_trust LOGIN;
SET password_encryption = 'md5';
CREATE ROLE u_md5 LOGIN PASSWORD 'md5 secret'' "x"';
SET password_encryption = 'scram-sha-256';
CREATE ROLE u_scram LOGIN PASSWORD 'sčram secret';
CREATE ROLE u_plain LOGIN PASSWORD 'plain secret';
SQL
hba=$(psql -XAtq "$AUTH_URL" -c "SHOW hba_file")
cat >"$hba" <<'HBA'
local all u_trust trust
local all u_md5 md5
local all u_scram scram-sha-256
local all u_plain password
local all all trust
HBA
assert_eq t "$(psql -XAtq "$AUTH_URL" -c "SELECT pg_reload_conf()")" "pg_hba reloaded"
sleep 0.3
[ "$(psql -XAtq "$AUTH_URL" -c "SELECT count(*) FROM pg_hba_file_rules WHERE error IS NULL AND
     auth_method IN ('md5', 'scram-sha-256', 'password')")" = 3 ] || fail "pg_hba.conf not in effect"

auth() { # USER PASSWORD
    get /pg/auth --get --data-urlencode "host=$AUTH_HOST" --data-urlencode "port=$AUTH_PORT" \
        --data-urlencode "user=$1" --data-urlencode "password=$2"
}
auth u_trust ""
assert_eq u_trust "$(json_field "$BODY" ok)" "trust: $BODY"
auth u_md5 "md5 secret' \"x\""
assert_eq u_md5 "$(json_field "$BODY" ok)" "md5: $BODY"
auth u_scram "sčram secret"
assert_eq u_scram "$(json_field "$BODY" ok)" "scram-sha-256: $BODY"
auth u_plain "plain secret"
assert_eq u_plain "$(json_field "$BODY" ok)" "password: $BODY"
for u in u_md5 u_scram u_plain; do
    auth "$u" "wrong"
    assert_eq 28P01 "$(json_field "$BODY" sqlstate)" "$u with a wrong password: $BODY"
done
get /pg/auth --get --data-urlencode "host=$AUTH_HOST" --data-urlencode "port=$AUTH_PORT" --data-urlencode "user=u_scram"
grep -q "none was given" <<<"$BODY" || fail "scram without a password: $BODY"

# --- PostgreSQL gone: connection refused quickly, a 503 ---------------------
"$CRIER_BIN" cluster stop "$PGA" >/dev/null
start=$(date +%s%N)
auth u_trust ""
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
grep -q "cannot connect to PostgreSQL" <<<"$BODY" || fail "a stopped cluster: $BODY"
[ "$elapsed_ms" -lt 2000 ] || fail "a stopped cluster took ${elapsed_ms} ms to refuse"

stop_nginx
ALLOWED_LOG_ERRORS='connect\(\) to unix:.*pg-auth/.s.PGSQL.[0-9]+ failed' # the stopped cluster, above
nginx_log_clean
echo "ok"
