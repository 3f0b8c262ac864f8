#!/usr/bin/env bash
# The operator's status page (GET /status, /status.json, POST /status/replay)
# in a real headless Chromium driven through chromedriver's WebDriver API
# (tests/support/webdriver_status.py): it shows the live worker and a dead
# letter this test made (a webhook answered 400), its Replay button makes the
# delivery due again and the receiver, now answering 200, gets it. Screenshots
# go to the test's work directory. Also: who is refused (a client not on
# loopback, a foreign Host or Origin, a replay without the CSRF header, a
# missing or wrong operator key).
. "$(dirname "$0")/../support/lib.sh"
for bin in /usr/bin/chromium /usr/bin/chromedriver; do
    [ -x "$bin" ] || fail "$bin is missing: run scripts/install-deps (Debian's chromium and chromium-driver)"
done
new_db

# wait_port LOG: the port crier serve logged it listens on.
wait_port() {
    local port=""
    for _ in $(seq 300); do
        port=$(grep -o 'listening on http://[^ ]*:[0-9]*' "$1" | grep -o '[0-9]*$' || true)
        [ -n "$port" ] && break
        kill -0 "$SERVE_PID" 2>/dev/null || fail "serve exited: $(cat "$1")"
        sleep 0.1
    done
    [ -n "$port" ] || fail "the HTTP API did not start: $(cat "$1")"
    echo "$port"
}

# code URL [curl args…]: the HTTP status of a request, its body in $WORK/body.
code() {
    local url=$1
    shift
    curl -s -o "$WORK/body" -w '%{http_code}' "$@" "$url"
}

start_receiver hooks --statuses 400,200
# every interface, so that a request from this host's non-loopback address can be refused
ping_serve serve "$RECEIVER_URL" --heartbeat 1s --http :0
port=$(wait_port "$WORK/serve.log")
API="http://127.0.0.1:$port"
ping broken
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'dead' AND last_status = 400" 20 \
    "the 400 makes a dead delivery"
delivery=$(sql "SELECT id FROM crier.deliveries WHERE state = 'dead'")
wait_for "SELECT count(*) = 1 FROM crier.rules_status
          WHERE crier.worker_state(heartbeat_at, heartbeat_interval, stopped_at) = 'alive'" 10 "a live worker"
worker=$(sql "SELECT worker FROM crier.rules_status")

# The page and its data answer loopback clients.
assert_eq 200 "$(code "$API/")" "GET /"
grep -q '<title>crier status</title>' "$WORK/body" || fail "GET / is the status page: $(head -c 300 "$WORK/body")"
assert_eq 200 "$(code "$API/status")" "GET /status"
assert_eq 200 "$(code "$API/status.json")" "GET /status.json"
/usr/bin/python3 - "$WORK/body" "$worker" "$delivery" <<'PY' || fail "status.json: $(head -c 2000 "$WORK/body")"
import json, sys
d = json.load(open(sys.argv[1]))
assert [w["state"] for w in d["workers"] if w["worker"] == sys.argv[2]] == ["alive"], d["workers"]
assert [x["id"] for x in d["dead_letters"] if x["kind"] == "delivery"] == [int(sys.argv[3])], d["dead_letters"]
assert d["totals"]["deliveries_dead"] == 1 and d["tenants"][0]["tenant"] == "acme", d
assert len(d["series"]) == d["minutes"] == 15, d["series"]
assert sum(m["events_fanned_out"] for m in d["series"]) == 1, d["series"]
assert sum(m["deliveries_dead"] for m in d["series"]) == 1, d["series"]
PY

# Refused: another client address, a foreign Host (DNS rebinding) or Origin.
other=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+\.' | grep -v '^127\.' | head -1 || true)
if [ -n "$other" ]; then
    assert_eq 403 "$(code "http://$other:$port/status.json")" "status.json from $other"
    grep -q '"operator_only"' "$WORK/body" || fail "refusal code: $(cat "$WORK/body")"
    grep -q 'operator-key' "$WORK/body" || fail "the refusal says what to do: $(cat "$WORK/body")"
    assert_eq 403 "$(code "http://$other:$port/")" "the page from $other"
    grep -q '<h1>crier status: refused (403)</h1>' "$WORK/body" && grep -q operator_only "$WORK/body" ||
        fail "an HTML refusal for the page: $(cat "$WORK/body")"
else
    note "no non-loopback address on this host: the refusal by client address is not exercised"
fi
assert_eq 403 "$(code "$API/status.json" -H 'Host: evil.example:80')" "a foreign Host"
assert_eq 403 "$(code "$API/status.json" -H 'Origin: http://evil.example')" "a foreign Origin"

# Replay without the CSRF header (what a form of another site could send) changes nothing.
body="{\"kind\":\"delivery\",\"id\":$delivery}"
assert_eq 403 "$(code "$API/status/replay" -X POST -H 'Content-Type: application/json' -d "$body")" \
    "replay without X-Crier-Operator"
grep -q '"csrf_header_required"' "$WORK/body" || fail "refusal code: $(cat "$WORK/body")"
assert_eq 415 "$(code "$API/status/replay" -X POST -H 'X-Crier-Operator: 1' \
    -H 'Content-Type: text/plain' -d "$body")" "a text/plain replay (a form's)"
assert_eq 403 "$(code "$API/status/replay" -X POST -H 'Content-Type: application/json' \
    -H 'X-Crier-Operator: 1' -H 'Origin: http://evil.example' -d "$body")" "a cross-site replay"
assert_eq dead "$(sql "SELECT state FROM crier.deliveries WHERE id = $delivery")" "refused replays change nothing"

# The browser: the page shows the worker and the dead letter; Replay replays it.
/usr/bin/python3 "$CRIER_SOURCE_DIR/tests/support/webdriver_status.py" --url "$API/status" \
    --worker "$worker" --delivery "$delivery" --shots "$WORK" || fail "the browser test failed"
[ -s "$WORK/status_page.png" ] || fail "no screenshot"
wait_for "SELECT state = 'delivered' FROM crier.deliveries WHERE id = $delivery" 20 \
    "the replayed delivery is delivered"
assert_eq 2 "$(requests_at "$RECEIVER_LOG")" "the receiver got the 400 and the replay"
assert_eq 404 "$(code "$API/status/replay" -X POST -H 'Content-Type: application/json' \
    -H 'X-Crier-Operator: 1' -d "$body")" "a second replay finds nothing dead"
echo "screenshot: $WORK/status_page.png (after the replay: $WORK/status_page_after_replay.png)"

# With an operator key: the key is needed (from loopback too), and enough (a replay needs no other header).
key=0123456789abcdef0123
CRIER_OPERATOR_KEY=$key "$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/tests/support/rules" --set "ping_url=$RECEIVER_URL" \
    --no-workers --http 127.0.0.1:0 >"$WORK/keyed.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
KEYED="http://127.0.0.1:$(wait_port "$WORK/keyed.log")"
assert_eq 200 "$(code "$KEYED/status")" "the page itself (no data) with a key set"
assert_eq 401 "$(code "$KEYED/status.json")" "status.json without the key"
grep -q '"unauthorized"' "$WORK/body" || fail "refusal code: $(cat "$WORK/body")"
assert_eq 401 "$(code "$KEYED/status.json" -H "Authorization: Bearer ${key}x")" "a wrong key"
grep -q '"invalid_operator_key"' "$WORK/body" || fail "refusal code: $(cat "$WORK/body")"
assert_eq 200 "$(code "$KEYED/status.json" -H "Authorization: Bearer $key")" "the key"
assert_eq 401 "$(code "$KEYED/status/replay" -X POST -H 'Content-Type: application/json' \
    -H 'X-Crier-Operator: 1' -d "$body")" "replay without the key"
assert_eq 404 "$(code "$KEYED/status/replay" -X POST -H 'Content-Type: application/json' \
    -H "Authorization: Bearer $key" -d "$body")" "replay with the key (nothing dead left)"
echo "ok"
