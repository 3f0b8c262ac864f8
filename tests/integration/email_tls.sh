#!/usr/bin/env bash
# The email channel over STARTTLS to a real SMTP server (aiosmtpd) whose
# certificate comes from a CA of the test's own: without --ca-file it is
# refused and no message is handed over; with it every message goes through
# TLS; a server with a certificate that --ca-file does not vouch for is refused.
. "$(dirname "$0")/../support/lib.sh"
new_db
make_test_ca "$WORK"

# sink NAME CERT KEY: an SMTP server requiring STARTTLS with that certificate;
# sets SINK_PORT, and its log is $WORK/NAME.jsonl.
sink() {
    rm -f "$WORK/$1.port"
    : >"$WORK/$1.jsonl"
    /usr/bin/python3 "$CRIER_SOURCE_DIR/tests/support/smtp_sink.py" --port-file "$WORK/$1.port" \
        --log "$WORK/$1.jsonl" --tls-cert "$2" --tls-key "$3" &
    PIDS+=($!)
    for _ in $(seq 100); do [ -s "$WORK/$1.port" ] && break; sleep 0.1; done
    SINK_PORT=$(cat "$WORK/$1.port") || fail "the SMTP sink $1 did not start"
}

# notices NAME PORT [crier serve args…]: crier serve sends one notice (two
# emails) to the sink on PORT until both are delivered or have failed once.
notices() {
    local name=$1 port=$2
    shift 2
    "$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/tests/support/rules" --poll 0.2 --set ping_url=http://127.0.0.1:9/ \
        --smtp-url "smtp://127.0.0.1:$port" "$@" >"$WORK/$name.log" 2>&1 &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    sql "SELECT crier.emit('acme', 'notice', '$name', '{\"title\":\"Maintenance\"}')" >/dev/null
    wait_for "SELECT count(DISTINCT delivery_id) = 2 FROM crier.delivery_attempts a
              JOIN crier.deliveries d ON d.id = a.delivery_id JOIN crier.notifications n ON n.id = d.notification_id
              WHERE n.entity_id = '$name'" 30 "$name: both emails attempted"
    stop_serve
}

# first_errors NAME: the errors of NAME's first attempts.
first_errors() {
    sql "SELECT string_agg(DISTINCT coalesce(a.error, 'none'), '; ') FROM crier.delivery_attempts a
         JOIN crier.deliveries d ON d.id = a.delivery_id JOIN crier.notifications n ON n.id = d.notification_id
         WHERE n.entity_id = '$1' AND a.attempt = 1"
}

sink good "$WORK/server.pem" "$WORK/server.key"
GOOD=$SINK_PORT

# Without --ca-file the system bundle does not know the test CA.
notices untrusted "$GOOD"
case "$(first_errors untrusted)" in *[Cc]ertificate*) ;;
*) fail "without --ca-file the server's certificate should be refused: $(first_errors untrusted)" ;; esac
assert_eq 0 "$(grep -c . "$WORK/good.jsonl" || true)" "messages handed over without the CA"
empty_tables

# With it: delivered, through TLS.
notices trusted "$GOOD" --ca-file "$WORK/bundle.pem"
assert_eq "none" "$(first_errors trusted)" "errors of the first attempts with --ca-file"
assert_eq 2 "$(grep -c '"tls": true' "$WORK/good.jsonl" || true)" "messages handed over through TLS"
assert_eq 2 "$(grep -c . "$WORK/good.jsonl")" "messages at the server"

# A certificate the CA file does not vouch for is refused.
sink rogue "$WORK/rogue.pem" "$WORK/rogue.key"
notices rogue "$SINK_PORT" --ca-file "$WORK/bundle.pem"
case "$(first_errors rogue)" in *[Cc]ertificate*) ;;
*) fail "a self-signed server certificate should be refused: $(first_errors rogue)" ;; esac
assert_eq 0 "$(grep -c . "$WORK/rogue.jsonl" || true)" "messages handed over to the self-signed server"
echo "ok"
