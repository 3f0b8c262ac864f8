#!/usr/bin/env bash
# A burst of emails larger than the SMTP sender's connections (64): every
# message is delivered once and none dies. The email sender used to refuse
# sends past its 64 transactions while the delivery worker took up to
# --max-inflight (512) rows, and a refused send was a dead delivery ("the
# email was refused before sending"); now the messages past 64 wait in
# libcurl's queue for a connection.
. "$(dirname "$0")/../support/lib.sh"
new_db

/usr/bin/python3 "$CRIER_SOURCE_DIR/tests/support/smtp_sink.py" --port 0 --port-file "$WORK/smtp.port" \
    --log "$WORK/mail.jsonl" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/smtp.port" ] && break; sleep 0.1; done
[ -s "$WORK/smtp.port" ] || fail "the SMTP sink did not start"
port=$(cat "$WORK/smtp.port")

# 150 notices x 2 recipients = 300 emails, fanned out in one batch
sql "SELECT count(crier.emit('acme', 'notice', 'n' || i, jsonb_build_object('title', 'Notice ' || i)))
     FROM generate_series(1, 150) AS i" >/dev/null
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/tests/support/rules" --poll 0.2 --set ping_url=http://127.0.0.1:9/ \
    --smtp-url "smtp://127.0.0.1:$port" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
wait_for "SELECT count(*) = 300 FROM crier.deliveries WHERE state IN ('delivered', 'dead')" 60 \
    "the 300 emails are sent"
stop_serve
assert_eq "300|0" "$(sql "SELECT count(*) FILTER (WHERE state = 'delivered'), count(*) FILTER (WHERE state = 'dead')
                          FROM crier.deliveries")" "delivered and dead emails"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.delivery_attempts WHERE outcome <> 'delivered'")" \
    "attempts that did not deliver"
assert_eq 300 "$(grep -c . "$WORK/mail.jsonl")" "messages at the SMTP server"
grep -q "refused before sending" "$WORK/serve.log" && fail "a send was refused: $(grep -m2 refused "$WORK/serve.log")"
echo "ok"
