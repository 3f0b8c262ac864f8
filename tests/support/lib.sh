# lib.sh — shared helpers for the integration tests (sourced): a fresh database
# in the fixture cluster, a real local HTTP receiver, crier processes, assertions,
# and cleanup of everything a test started.
set -euo pipefail

: "${CRIER_BIN:?run through ctest (CRIER_BIN unset)}"
: "${CRIER_SOURCE_DIR:?run through ctest}"
: "${CRIER_TEST_DIR:?run through ctest}"
: "${CRIER_TEST_PG:?run through ctest}"

TEST_NAME=$(basename "$0" .sh)
WORK="$CRIER_TEST_DIR/$TEST_NAME"
rm -rf "$WORK"
mkdir -p "$WORK"
PIDS=()
# The receivers run on loopback, which webhooks refuse unless allowed.
export CRIER_ALLOW_TARGETS=loopback

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap cleanup EXIT

fail() {
    echo "FAIL ($TEST_NAME): $*" >&2
    exit 1
}

note() {
    echo "-- $*" >&2
}

assert_eq() { # expected actual message
    if [ "$1" != "$2" ]; then
        fail "$3: expected '$1', got '$2'"
    fi
}

# new_db: creates a fresh database for this test, exports CRIER_DATABASE_URL and
# applies the migrations.
new_db() {
    local base db
    base=$("$CRIER_BIN" cluster url "$CRIER_TEST_PG")
    db="t_${TEST_NAME//[^a-zA-Z0-9_]/_}"
    psql -XAtq "$base" -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" \
        >/dev/null 2>&1 || psql -XAtq "$base" -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db"
    export CRIER_DATABASE_URL="$base dbname=$db"
    "$CRIER_BIN" migrate >/dev/null
}

# sql "SELECT …": runs one statement on the test database, prints unaligned rows.
sql() {
    psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 -c "$1"
}

# start_receiver NAME [receiver.py args…]: starts a real HTTP receiver; sets
# RECEIVER_URL and RECEIVER_LOG.
start_receiver() {
    local name=$1
    shift
    RECEIVER_LOG="$WORK/$name.jsonl"
    : >"$RECEIVER_LOG"
    /usr/bin/python3 "$CRIER_SOURCE_DIR/tests/support/receiver.py" --port-file "$WORK/$name.port" \
        --log "$RECEIVER_LOG" "$@" &
    PIDS+=($!)
    for _ in $(seq 100); do
        [ -s "$WORK/$name.port" ] && break
        sleep 0.1
    done
    [ -s "$WORK/$name.port" ] || fail "receiver $name did not start"
    RECEIVER_URL="http://127.0.0.1:$(cat "$WORK/$name.port")/hooks/billing"
}

# start_serve NAME [crier serve args…]: starts `crier serve` on the example
# rules in the background with its log in $WORK/NAME.log; sets SERVE_PID.
start_serve() {
    local name=$1
    shift
    "$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/examples/rules" --set "billing_webhook_url=$RECEIVER_URL" "$@" \
        >"$WORK/$name.log" 2>&1 &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
}

# wait_for "SQL returning t/f" TIMEOUT_S MESSAGE
wait_for() {
    local i
    for i in $(seq $(($2 * 10))); do
        if [ "$(sql "$1")" = "t" ]; then
            return 0
        fi
        sleep 0.1
    done
    fail "$3 (waited $2 s)"
}

# receiver_ids: prints the webhook-id of every request the receiver logged.
receiver_ids() {
    /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line:
        print(json.loads(line)["headers"].get("webhook-id", ""))
' "$RECEIVER_LOG"
}

# ping_serve NAME URL [crier serve args…]: starts `crier serve` on the delivery
# tests' rules (tests/support/rules), sending pings to URL; sets SERVE_PID.
ping_serve() {
    local name=$1 url=$2
    shift 2
    "$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/tests/support/rules" --poll 0.2 --set "ping_url=$url" "$@" \
        >"$WORK/$name.log" 2>&1 &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
}

# stop_serve: SIGTERM to SERVE_PID and wait for it to exit.
stop_serve() {
    kill -TERM "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
}

# ping ENTITY: emits one ping event.
ping() {
    sql "SELECT crier.emit('acme', 'ping', '$1')" >/dev/null
}

# delivery_of ENTITY COLUMN: a column of the ping's delivery.
delivery_of() {
    sql "SELECT d.$2 FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
         WHERE n.entity_id = '$1'"
}

# requests_at LOG: the number of requests a receiver logged.
requests_at() {
    grep -c . "$1" || true
}

# note_rules: writes start_api's rules ($WORK/rules/rules.lua) for tests of
# the HTTP API itself: one event type, note.created with payload {text,
# data?} (data: any JSON object or array), notifying ann in her feed.
note_rules() {
    mkdir -p "$WORK/rules"
    cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "note.created" { payload = { text = "string", data = "table?" } }
crier.rule "note.created" {
    recipients = { "ann" },
    channels = { "feed" },
    feed = { title = "{{ payload.text }}" },
}
LUA
}

# start_api NAME [serve args…]: `crier serve --rules $WORK/rules --poll 0.2
# --http 127.0.0.1:0 args…` logging to $WORK/NAME.log; waits for the HTTP API
# and sets API (its base URL) and SERVE_PID.
start_api() {
    local name=$1 port=""
    shift
    "$CRIER_BIN" serve --rules "$WORK/rules" --poll 0.2 --http 127.0.0.1:0 "$@" >"$WORK/$name.log" 2>&1 &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    for _ in $(seq 300); do
        port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$WORK/$name.log" | grep -o '[0-9]*$' || true)
        [ -n "$port" ] && break
        kill -0 "$SERVE_PID" 2>/dev/null || fail "serve exited: $(cat "$WORK/$name.log")"
        sleep 0.1
    done
    [ -n "$port" ] || fail "the HTTP API did not start: $(cat "$WORK/$name.log")"
    API="http://127.0.0.1:$port"
}

# token_with_claim TOKEN CLAIM VALUE: a user token with one claim (t: tenant,
# u: user) changed and its signature kept: what someone altering a token gets.
token_with_claim() {
    /usr/bin/python3 -c '
import base64, json, sys
head, payload, mac = sys.argv[1].split(".")
claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
claims[sys.argv[2]] = sys.argv[3]
p = base64.urlsafe_b64encode(json.dumps(claims, separators=(",", ":")).encode()).decode().rstrip("=")
print(".".join([head, p, mac]))' "$1" "$2" "$3"
}

# make_test_ca DIR: a CA of the test's own (DIR/ca.pem), a certificate for
# 127.0.0.1 signed by it (DIR/server.pem, DIR/server.key) and a self-signed one
# for 127.0.0.1 that nothing trusts (DIR/rogue.pem, DIR/rogue.key); DIR/bundle.pem
# is what an operator with a private CA gives --ca-file: the system bundle and the CA.
make_test_ca() {
    local d=$1
    command -v openssl >/dev/null || fail "openssl is missing (Debian package openssl)"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.pem" -days 2 \
        -subj "/CN=crier test CA" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout "$d/server.key" -out "$d/server.csr" -subj "/CN=127.0.0.1" \
        2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' >"$d/san.ext"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
        -out "$d/server.pem" -days 2 -extfile "$d/san.ext" 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/rogue.key" -out "$d/rogue.pem" -days 2 \
        -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
    if [ -r /etc/ssl/certs/ca-certificates.crt ]; then
        cat /etc/ssl/certs/ca-certificates.crt "$d/ca.pem" >"$d/bundle.pem"
    else
        cp "$d/ca.pem" "$d/bundle.pem"
    fi
}

# free_port: a loopback TCP port with nothing listening on it (at the time asked).
free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# empty_tables: removes every event, notification, delivery, attempt and endpoint of
# the test database, so that the next part of a test starts from nothing.
empty_tables() {
    sql "TRUNCATE crier.events, crier.notifications, crier.deliveries, crier.delivery_attempts, crier.endpoints
         CASCADE" >/dev/null
}
