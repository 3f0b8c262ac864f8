#!/usr/bin/env bash
# One client cannot lock everyone out of the HTTP API (issue 10 item 4): a
# slowloris from 127.0.0.1 (more connections than --http-max-connections,
# each sending its headers a byte at a time) while a normal client from
# 127.0.0.2 keeps getting answers within 2 s — with the default limits, then
# with --http-max-per-address, --http-read-timeout and --http-max-streams
# set: connections over the per-address limit are refused at once, the slow
# ones (headers or body trickled) are closed by the read timeout although
# they keep sending, an idle kept-alive connection too; live feeds beyond
# their slots get 503 busy while ordinary requests are answered, a stream is
# not cut by the read timeout, and a closed stream frees its slot.
#
# The server listens on 127.0.0.1; the normal client binds its socket to
# 127.0.0.2 (loopback is all of 127/8 on Linux), so the server sees two
# addresses.
. "$(dirname "$0")/../support/lib.sh"
new_db
note_rules

help=$("$CRIER_BIN" serve --help)
for flag in --http-max-per-address --http-read-timeout --http-max-streams; do
    grep -q -- "$flag" <<<"$help" || fail "crier serve --help does not document $flag"
done

# slowloris NAME [slowloris.py args…]: runs the slow clients and the normal
# one against the API; the outcome is in $WORK/NAME.json.
slowloris() {
    local name=$1
    shift
    /usr/bin/python3 "$CRIER_SOURCE_DIR/tests/support/slowloris.py" --target "${API#http://}" \
        --out "$WORK/$name.json" "$@" || fail "slowloris.py failed"
}
# outcome NAME EXPR: a Python expression over the outcome (d), printed.
outcome() {
    /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v))' "$WORK/$1.json" "$2"
}
# client_answered NAME: the normal client got a 200 within 2 s every time.
client_answered() {
    local n bad
    bad=$(outcome "$1" "[c for c in d['client'] if c['status'] != 200 or c['latency'] > 2.0]")
    assert_eq "[]" "$bad" "$1: every request of the normal client from 127.0.0.2 answered 200 within 2 s"
    n=$(outcome "$1" "len(d['client'])")
    [ "$n" -ge 5 ] || fail "$1: the normal client made only $n requests"
    note "$1: $n requests of the normal client, slowest $(outcome "$1" "'%.3f s' % max(c['latency'] for c in d['client'])")"
}

note "defaults: 150 slow connections from one address, 100 connections at most"
start_api serve-defaults --http-max-connections 100
slowloris defaults --slow 150 --interval 0.5 --settle 1.5 --duration 6
client_answered defaults
held=$(outcome defaults "sum(1 for s in d['slow'] if s['closed_after'] is None or s['closed_after'] > 1.0)")
note "defaults: $held slow connections held a slot"
[ "$held" -le 64 ] || fail "one address held $held connections (the default limit per address is 64)"
stop_serve

note "--http-max-per-address 20 --http-read-timeout 2s --http-max-streams 2"
start_api serve-limits --http-max-connections 100 --http-max-per-address 20 --http-read-timeout 2s \
    --http-max-streams 2 --stream-keepalive 0.5s
slowloris limits --slow 30 --slow-body 10 --interval 0.3 --settle 0.5 --duration 6
client_answered limits
refused=$(outcome limits "d['refused_on_open'] + sum(1 for s in d['slow'] if s['closed_after'] is not None and s['closed_after'] < 1.0)")
[ "$refused" -ge 20 ] || fail "only $refused of 40 connections from one address were refused at once (limit 20)"
accepted=$(outcome limits "[s for s in d['slow'] if s['closed_after'] is None or s['closed_after'] >= 1.0]")
assert_eq 20 "$(outcome limits "len([s for s in d['slow'] if s['closed_after'] is None or s['closed_after'] >= 1.0])")" \
    "connections from one address that got a slot"
assert_eq "[]" "$(outcome limits "[s for s in d['slow'] if (s['closed_after'] is None or s['closed_after'] >= 1.0) and not (1.5 <= s['closed_after'] <= 4.0)]")" \
    "every slow connection closed 2 s (+ up to 2 s) after it opened, although it kept sending"
[ "$(outcome limits "sum(1 for s in d['slow'] if s['body'] and s['closed_after'] is not None and s['closed_after'] >= 1.0)")" -ge 1 ] ||
    fail "no slow body got a slot (the test needs one): $accepted"
assert_eq 0 "$(outcome limits "sum(1 for s in d['slow'] if s['answered'])")" "no slow connection was answered"

note "live feeds: two slots, ordinary requests unaffected"
KEY=$("$CRIER_BIN" keys create --tenant acme --name tests 2>/dev/null)
ANN=$("$CRIER_BIN" token --tenant acme --user ann 2>/dev/null)
[[ $ANN == cut1.* ]] || fail "crier token printed '$ANN'"
/usr/bin/python3 - "${API#http://}" "$ANN" <<'PY' || fail "live feed slots (see above)"
import json, socket, sys, time

host, port = sys.argv[1].split(":")
token = sys.argv[2]
failures = []


def connect():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.2", 0))
    s.settimeout(5)
    s.connect((host, int(port)))
    return s


def head(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def stream():
    s = connect()
    s.sendall(("GET /v1/feed/stream?access_token=%s HTTP/1.1\r\nHost: t\r\n\r\n" % token).encode())
    return s, head(s)


def is_open(s):
    """True when the server has not closed s (what it sent meanwhile is dropped)."""
    s.setblocking(False)
    try:
        while True:
            if not s.recv(65536):
                return False
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    finally:
        s.setblocking(True)


def get(path):
    s = connect()
    s.sendall(("GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" % path).encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return int(data.split()[1]), data.split(b"\r\n\r\n", 1)[1]


one, h1 = stream()
two, h2 = stream()
for name, h in (("first", h1), ("second", h2)):
    if not h.startswith(b"HTTP/1.1 200"):
        failures.append("the %s stream was not opened: %r" % (name, h[:200]))
three, h3 = stream()
if not h3.startswith(b"HTTP/1.1 503"):
    failures.append("a third stream (2 slots) was not refused with 503: %r" % h3[:300])
else:
    body = h3.split(b"\r\n\r\n", 1)[1]
    while b"}}" not in body:
        chunk = three.recv(4096)
        if not chunk:
            break
        body += chunk
    if json.loads(body)["error"]["code"] != "busy":
        failures.append("the third stream's refusal is not busy: %r" % body)
three.close()
status, _ = get("/healthz")
if status != 200:
    failures.append("/healthz with both slots taken: %d" % status)

# an idle kept-alive connection is closed by the read timeout (2 s)
idle = connect()
idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
if not head(idle).startswith(b"HTTP/1.1 200"):
    failures.append("the kept-alive connection's request was not answered")
time.sleep(3.5)
if is_open(idle):
    failures.append("an idle kept-alive connection was still open 3.5 s after its answer (read timeout 2 s)")
for name, s in (("first", one), ("second", two)):
    if not is_open(s):
        failures.append("the %s stream was closed by the read timeout" % name)

one.close()
deadline, reopened = time.monotonic() + 5, None
while time.monotonic() < deadline:
    s, h = stream()
    if h.startswith(b"HTTP/1.1 200"):
        reopened = s
        break
    s.close()
    time.sleep(0.2)
if reopened is None:
    failures.append("a closed stream's slot was not freed within 5 s")
status, metrics = get("/metrics")
for line in metrics.decode().splitlines():
    if line.startswith(("crier_http_read_timeouts_total", "crier_http_streams_refused_total",
                        "crier_http_stream_slots", "crier_http_connections_refused_total")):
        print("-- " + line, file=sys.stderr)
values = dict(l.split(" ", 1) for l in metrics.decode().splitlines() if l and not l.startswith("#"))
if float(values.get("crier_http_read_timeouts_total", "0")) < 20:
    failures.append("crier_http_read_timeouts_total is %s, expected at least 20"
                    % values.get("crier_http_read_timeouts_total"))
if float(values.get("crier_http_streams_refused_total", "0")) < 1:
    failures.append("crier_http_streams_refused_total does not count the refused stream")

for f in failures:
    print("FAIL: " + f, file=sys.stderr)
sys.exit(1 if failures else 0)
PY

if grep -q " ERROR " "$WORK"/serve-*.log; then
    fail "the log has errors: $(grep -h ' ERROR ' "$WORK"/serve-*.log | head -3)"
fi
note "ok"
