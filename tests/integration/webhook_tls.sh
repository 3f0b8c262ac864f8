#!/usr/bin/env bash
# Webhooks to https receivers (a real nginx with TLS that also offers HTTP/2):
# certificates are verified against --ca-file (and without it against the
# system bundle, which does not know this test's CA); a burst of new TLS
# connections goes through on the first attempt, over HTTP/1.1, none stalled.
# Before crier set no CA directory, every new connection parsed the whole CA
# bundle again, and a burst of 3,000 webhooks to one receiver spent 12-13 s of
# crier's CPU and timed out 200-400 first handshakes; over HTTP/2, 2 bursts of
# 5 left 7-34 answered requests unread until their 15-s timeout
# (docs/BENCHMARKS.md, bench deliver, twenty-second session).
. "$(dirname "$0")/../support/lib.sh"
NGINX=${CRIER_TEST_NGINX:-/usr/sbin/nginx}
[ -x "$NGINX" ] || fail "nginx is missing at $NGINX (Debian package nginx)"
new_db

BURST=${WEBHOOK_TLS_BURST:-3000}

make_test_ca "$WORK"
cd "$WORK"

PORT=$(free_port)
ROGUE_PORT=$(free_port)
mkdir -p nginx-temp
cat >nginx.conf <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
    client_body_temp_path $WORK/nginx-temp;
    proxy_temp_path $WORK/nginx-temp;
    fastcgi_temp_path $WORK/nginx-temp;
    uwsgi_temp_path $WORK/nginx-temp;
    scgi_temp_path $WORK/nginx-temp;
    log_format tls '\$server_port \$server_protocol \$status \$connection \$uri';
    access_log $WORK/access.log tls;
    keepalive_requests 100000;
    server {
        listen 127.0.0.1:$PORT ssl http2;
        ssl_certificate $WORK/server.pem;
        ssl_certificate_key $WORK/server.key;
        location / { return 204; }
    }
    server {
        listen 127.0.0.1:$ROGUE_PORT ssl;
        ssl_certificate $WORK/rogue.pem;
        ssl_certificate_key $WORK/rogue.key;
        location / { return 204; }
    }
}
EOF
"$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/nginx-error.log" &
PIDS+=("$!")
for _ in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.1
done
cd - >/dev/null
URL="https://127.0.0.1:$PORT/hooks/tls"

# Bad input: a --ca-file that is not a readable file is refused before anything starts.
if out=$("$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/tests/support/rules" --set "ping_url=$URL" \
    --ca-file "$WORK/missing.pem" 2>&1); then
    fail "--ca-file of a missing file was accepted"
fi
case "$out" in *"--ca-file $WORK/missing.pem: No such file"*"PEM CA certificates"*) ;;
*) fail "the error for a missing --ca-file should name it and say what to give: $out" ;; esac

# refused NAME URL WHAT [crier serve args…]: one ping to URL fails its first
# attempt on the receiver's certificate, and no request reaches the receiver.
refused() {
    local name=$1 url=$2 what=$3 err path
    path=/${url#https://*/}
    shift 3
    ping_serve "$name" "$url" "$@"
    ping "$name"
    wait_for "SELECT count(*) >= 1 FROM crier.delivery_attempts" 30 "an attempt $what"
    stop_serve
    err=$(sql "SELECT error FROM crier.delivery_attempts ORDER BY started_at LIMIT 1")
    case "$err" in *[Cc]ertificate*) ;; *) fail "$what the certificate should be refused: '$err'" ;; esac
    assert_eq 0 "$(grep -c " $path\$" "$WORK/access.log" || true)" \
        "requests that reached nginx $what"
    empty_tables
}

# Without --ca-file the system bundle does not know the test CA.
refused s1 "$URL" "without --ca-file"

# With it: a burst, every delivery on its first attempt, over HTTP/1.1 although
# the receiver offers HTTP/2, and no send waiting for its timeout.
ping_serve s2 "$URL" --ca-file "$WORK/bundle.pem"
for _ in $(seq 100); do grep -q "engine: running" "$WORK/s2.log" && break; sleep 0.1; done
sql "SELECT count(crier.emit('acme', 'ping', 'b' || g)) FROM generate_series(1, $BURST) AS g" >/dev/null
START=$SECONDS
wait_for "SELECT count(*) = $BURST FROM crier.deliveries WHERE state = 'delivered'" 120 \
    "the burst of $BURST webhooks delivered"
took=$((SECONDS - START))
cpu=$(awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$SERVE_PID/stat")
stop_serve
connections=$(awk -v p="$PORT" '$1 == p { print $4 }' "$WORK/access.log" | sort -u | wc -l)
note "$BURST webhooks over TLS in ${took} s: $connections connections, crier serve's CPU ${cpu} s in all"
assert_eq "0" "$(sql "SELECT count(*) FROM crier.delivery_attempts WHERE outcome <> 'delivered'")" \
    "failed attempts in the burst ($(sql "SELECT string_agg(DISTINCT error, '; ') FROM crier.delivery_attempts
                                          WHERE outcome <> 'delivered'"))"
assert_eq "$BURST" "$(sql "SELECT count(*) FROM crier.delivery_attempts")" "one attempt per delivery"
assert_eq "$BURST" "$(awk -v p="$PORT" '$1 == p && $2 == "HTTP/1.1" && $3 == 204' "$WORK/access.log" | wc -l)" \
    "requests answered over HTTP/1.1"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.delivery_attempts WHERE duration_ms >= 10000")" \
    "sends that took 10 s or more (the timeout is 15 s)"
empty_tables

# --ca-file does not turn verification off: a certificate it does not vouch for is refused.
refused s3 "https://127.0.0.1:$ROGUE_PORT/hooks/rogue" "of a self-signed receiver" --ca-file "$WORK/bundle.pem"
echo "ok"
