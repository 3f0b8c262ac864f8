#!/usr/bin/env bash
# The email channel through real `crier serve` and a real SMTP server
# (aiosmtpd): the server is down at first, then comes up; every message is
# delivered once, with a Message-ID derived from the notification key.
. "$(dirname "$0")/../support/lib.sh"
new_db

# A free port with nothing listening on it yet.
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/tests/support/rules" --poll 0.2 --set ping_url=http://127.0.0.1:9/ \
    --smtp-url "smtp://127.0.0.1:$port" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
for i in 1 2 3; do
    sql "SELECT crier.emit('acme', 'notice', 'n$i', '{\"title\":\"Maintenance $i\",\"body\":\"Tonight <22:00>\"}')" >/dev/null
done
wait_for "SELECT count(DISTINCT delivery_id) = 6 FROM crier.delivery_attempts WHERE outcome = 'retry'" 20 \
    "attempts fail while the SMTP server is down"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state IN ('delivered', 'dead')")" \
    "nothing delivered or dead while the server is down"

# The server comes up on that port.
/usr/bin/python3 "$CRIER_SOURCE_DIR/tests/support/smtp_sink.py" --port "$port" --port-file "$WORK/smtp.port" \
    --log "$WORK/mail.jsonl" &
PIDS+=($!)
wait_for "SELECT count(*) = 6 FROM crier.deliveries WHERE state = 'delivered'" 30 "delivered once the server is up"
stop_serve

assert_eq 6 "$(grep -c . "$WORK/mail.jsonl")" "messages at the SMTP server"
/usr/bin/python3 - "$WORK/mail.jsonl" "$CRIER_DATABASE_URL" <<'PY' || fail "message contents"
import json, subprocess, sys, collections
msgs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ids = collections.Counter()
for m in msgs:
    data = m["data"]
    head = data.split("\r\n\r\n", 1)[0]
    mid = [l for l in head.split("\r\n") if l.lower().startswith("message-id:")]
    assert len(mid) == 1, head
    ids[mid[0]] += 1
    assert m["mail_from"] == "notices@crier.test", m["mail_from"]
    assert m["rcpt_tos"][0] in ("ana@example.test", "ben@example.test"), m["rcpt_tos"]
    assert "Subject: Notice: Maintenance" in head, head
    assert "&lt;22:00&gt;" in data, "HTML part escapes the payload"
assert len(ids) == 6 and set(ids.values()) == {1}, ids
# Message-ID <msg_…@…> carries the delivery's message id (the notification key).
want = subprocess.run(["psql", "-XAtq", sys.argv[2], "-c",
                       "SELECT message_id FROM crier.deliveries ORDER BY 1"],
                      capture_output=True, text=True, check=True).stdout.split()
got = sorted(k.split("<", 1)[1].split("@", 1)[0] for k in ids)
assert got == want, (got, want)
PY
echo "ok"
