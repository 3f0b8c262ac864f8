#!/usr/bin/env bash
# crier serve under a service manager (systemd's Type=notify), played by a
# real datagram socket in /usr/bin/python3: READY=1 arrives once the engine
# runs and the HTTP API answers (never before), WATCHDOG=1 pings come at
# least twice per WATCHDOG_USEC, SIGHUP (ExecReload) gives RELOADING=1 then
# READY=1, SIGTERM gives STOPPING=1, and the embedded PostgreSQL — which
# speaks the same protocol — never notifies in crier's name.
. "$(dirname "$0")/../support/lib.sh"
new_db
mkdir -p "$WORK/rules"
cp "$CRIER_SOURCE_DIR/tests/support/rules/"*.lua "$WORK/rules/"

cat >"$WORK/manager.py" <<'PY'
"""A service manager's side of sd_notify: binds NOTIFY_SOCKET, starts the
command with it and WATCHDOG_USEC set, and checks the states it sends."""
import json, os, re, signal, socket, subprocess, sys, time, urllib.request

work, log_path, *cmd = sys.argv[1:]
path = os.path.join(work, "notify.sock")
if os.path.exists(path):
    os.unlink(path)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
os.chmod(path, 0o777)  # as systemd's own: any process may write, a postgres running as its user too
sock.settimeout(30)
env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
log = open(log_path, "w")
proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
states = []  # (seconds since start, state)
start = time.monotonic()


def fail(msg):
    proc.kill()
    print(f"FAIL: {msg}\nstates: {json.dumps(states)}\nlog:\n{open(log_path).read()}", file=sys.stderr)
    sys.exit(1)


def receive(until):
    """Datagrams until one contains `until`; returns that one."""
    while True:
        try:
            data, _ = sock.recvfrom(4096)
        except socket.timeout:
            fail(f"no {until!r} within 30 s")
        state = data.decode()
        states.append((round(time.monotonic() - start, 3), state))
        if until in state.split("\n"):
            return state


ready = receive("READY=1")
if any("READY=1" in s or "STOPPING=1" in s for _, s in states[:-1]):
    fail("something came before READY=1")
if "STATUS=running: rules version " not in ready:
    fail(f"READY=1 without a status: {ready!r}")
# ready means serving: the engine runs and the HTTP API answers
text = open(log_path).read()
if "engine: running" not in text:
    fail("READY=1 before the engine runs")
port = re.search(r"HTTP API listening on http://127\.0\.0\.1:(\d+)", text)
if not port:
    fail("READY=1 before the HTTP API listens")
with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/healthz", timeout=5) as r:
    if r.status != 200:
        fail(f"/healthz answered {r.status} at READY=1")
# the watchdog: WATCHDOG_USEC=400000 asks for a ping at least every 0.4 s
pings_from = time.monotonic()
for _ in range(5):
    receive("WATCHDOG=1")
elapsed = time.monotonic() - pings_from
if elapsed > 5 * 0.4 + 0.5:
    fail(f"5 watchdog pings took {elapsed:.2f} s")
# ExecReload=kill -HUP $MAINPID
proc.send_signal(signal.SIGHUP)
receive("RELOADING=1")
receive("READY=1")
proc.send_signal(signal.SIGTERM)
receive("STOPPING=1")
rc = proc.wait(30)
if rc != 0:
    fail(f"exit status {rc} after SIGTERM")
print(json.dumps(states))
PY

note "serve on a configured database"
/usr/bin/python3 "$WORK/manager.py" "$WORK" "$WORK/serve.log" "$CRIER_BIN" serve --rules "$WORK/rules" \
    --set ping_url=http://127.0.0.1:9/ --http 127.0.0.1:0 >"$WORK/states.json" || fail "see above"
grep -q "pinging the service manager's watchdog every 0.2s" "$WORK/serve.log" ||
    fail "serve says it pings the watchdog: $(cat "$WORK/serve.log")"

note "serve on the embedded cluster: PostgreSQL does not notify in crier's name"
# the embedded cluster's own postgres, built with systemd support, would send
# READY=1 to an inherited NOTIFY_SOCKET as soon as it accepts connections
env -u CRIER_DATABASE_URL /usr/bin/python3 "$WORK/manager.py" "$WORK" "$WORK/embedded.log" "$CRIER_BIN" serve \
    --data-dir "$WORK/pg" --rules "$WORK/rules" --set ping_url=http://127.0.0.1:9/ --http 127.0.0.1:0 \
    >"$WORK/states-embedded.json" || fail "see above"
[ ! -e "$WORK/pg/postmaster.pid" ] || fail "serve left its embedded PostgreSQL running"
echo "ok"
