# nginx.sh — helpers for the tests that run a real nginx with crier's Lua
# library (sourced after lib.sh): start_nginx on a free port from a config
# template, stop_nginx, get (curl), and the error-log check.

NGINX=/usr/sbin/nginx
NGINX_MODULES=/usr/lib/nginx/modules
NGINX_SUPPORT="$CRIER_SOURCE_DIR/tests/support/nginx"
[ -x "$NGINX" ] || fail "$NGINX missing (scripts/install-deps installs the nginx package)"
for so in ndk_http_module.so ngx_http_lua_module.so; do
    [ -f "$NGINX_MODULES/$so" ] || fail "$NGINX_MODULES/$so missing (scripts/install-deps installs libnginx-mod-http-lua)"
done

NGINX_PID=
NGINX_WORKERS=
NGINX_DIR="$WORK/nginx"
mkdir -p "$NGINX_DIR"

# stop_nginx: fast shutdown of the master (it stops its workers), waited for;
# whatever is left after 5 s is killed.
stop_nginx() {
    local pid
    [ -n "$NGINX_PID" ] || return 0
    kill -TERM "$NGINX_PID" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$NGINX_PID" 2>/dev/null || break
        sleep 0.1
    done
    for pid in $NGINX_PID $NGINX_WORKERS; do
        kill -9 "$pid" 2>/dev/null || true
    done
    wait "$NGINX_PID" 2>/dev/null || true
    NGINX_PID=
}
trap 'stop_nginx; cleanup' EXIT

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_nginx TEMPLATE [sed expressions…]: writes the config from TEMPLATE
# (@WORK@, @PORT@, @USER_LINE@, @LUA_DIR@, @HANDLER_DIR@, @WORKERS@ (default
# NGINX_WORKER_COUNT or 1), @DATABASE@ (CRIER_DATABASE_URL), @RULES_DIR@
# (RULES_DIR), @EXTRA_LOCATIONS@ (EXTRA_LOCATIONS) and the extra sed
# expressions) on a free port and starts nginx in the foreground of a
# background job; waits until /plain or /rules answers. Sets PORT and BASE.
start_nginx() {
    local template=$1 user_line="" status
    shift
    [ "$(id -u)" = 0 ] && user_line="user root;" # workers as nobody may not read a tree under /root
    mkdir -p "$NGINX_DIR/tmp"
    for _ in 1 2 3; do
        PORT=$(free_port)
        sed -e "s|@WORK@|$NGINX_DIR|g" -e "s|@PORT@|$PORT|g" -e "s|@USER_LINE@|$user_line|" \
            -e "s|@LUA_DIR@|$CRIER_SOURCE_DIR/lua|g" -e "s|@HANDLER_DIR@|$NGINX_SUPPORT|g" \
            -e "s|@WORKERS@|${NGINX_WORKER_COUNT:-1}|g" -e "s|@DATABASE@|${CRIER_DATABASE_URL:-}|g" \
            -e "s|@RULES_DIR@|${RULES_DIR:-$CRIER_SOURCE_DIR/examples/rules}|g" \
            -e "s|@EXTRA_LOCATIONS@|${EXTRA_LOCATIONS:-}|g" "$@" \
            "$template" >"$NGINX_DIR/nginx.conf"
        : >"$NGINX_DIR/error.log"
        "$NGINX" -p "$NGINX_DIR" -c "$NGINX_DIR/nginx.conf" -e "$NGINX_DIR/error.log" >"$NGINX_DIR/nginx.out" 2>&1 &
        NGINX_PID=$!
        BASE="http://127.0.0.1:$PORT"
        for _ in $(seq 100); do
            status=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/rules" || true)
            if [ "$status" = 200 ]; then
                sleep 0.1
                NGINX_WORKERS=$(pgrep -P "$NGINX_PID" | tr '\n' ' ' || true)
                return 0
            fi
            kill -0 "$NGINX_PID" 2>/dev/null || break
            sleep 0.05
        done
        stop_nginx
        grep -q "Address already in use" "$NGINX_DIR/error.log" "$NGINX_DIR/nginx.out" || break
    done
    fail "nginx did not start: $(cat "$NGINX_DIR/nginx.out" "$NGINX_DIR/error.log")"
}

BODY="" STATUS=""
# get PATH [curl args…]: sets STATUS and BODY.
get() {
    local path=$1
    shift
    STATUS=$(curl -sS -o "$WORK/body" -w '%{http_code}' "$@" "$BASE$path") || fail "curl $path failed"
    BODY=$(cat "$WORK/body")
}

# json_field JSON PATH…: prints one value of a JSON document (keys of
# nested objects in order; lists by index), or "" when absent.
json_field() {
    /usr/bin/python3 -c '
import json, sys
v = json.loads(sys.argv[1])
for k in sys.argv[2:]:
    if isinstance(v, list):
        k = int(k)
        v = v[k] if k < len(v) else None
    elif isinstance(v, dict):
        v = v.get(k)
    else:
        v = None
print("" if v is None else (json.dumps(v, separators=(",", ":"), ensure_ascii=False) if isinstance(v, (dict, list, bool)) else v))' "$@"
}

# nginx_log_clean: no Lua errors or global-variable warnings in the error
# log (lines matching ALLOWED_LOG_ERRORS, a regex, are expected ones).
nginx_log_clean() {
    local bad
    bad=$(grep -E '\[(alert|crit|error|emerg)\]|lua entry thread aborted|writing a global Lua variable' \
        "$NGINX_DIR/error.log" | grep -Ev "${ALLOWED_LOG_ERRORS:-^$}" || true)
    [ -z "$bad" ] || fail "nginx logged errors: $bad"
}
