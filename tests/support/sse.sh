# sse.sh — helpers for the integration tests of live feeds (sourced after
# lib.sh): start a real Server-Sent Events client (sse_client.py) in the
# background, and read or wait for the events it has written.

# stream NAME URL [HEADER…]: starts an SSE client writing to $WORK/NAME.events
# (its pid in PID_NAME).
stream() {
    local name=$1 url=$2
    shift 2
    rm -f "$WORK/$name.events"
    /usr/bin/python3 "$CRIER_SOURCE_DIR/tests/support/sse_client.py" "$url" "$WORK/$name.events" "$@" 2>"$WORK/$name.err" &
    eval "PID_$name=$!"
    PIDS+=("$!")
}
# events NAME EXPR: evaluates a Python expression over the events so far (ev:
# list of {"event", "id", "data"}; head: the status line; end: the stream
# ended; body: the body of a refused request), printing the result.
events() {
    /usr/bin/python3 - "$WORK/$1.events" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
head, ev = (lines[0] if lines else {}), [l for l in lines[1:] if "event" in l]
end = any(l.get("end") for l in lines)
body = next((json.loads(l["body"]) for l in lines[1:] if "body" in l), None)
items = [e["data"] for e in ev if e["event"] == "item"]
v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v))
PY
}
# wait_events NAME EXPR WHAT [SECONDS]: waits until EXPR is true.
wait_events() {
    local deadline=$((SECONDS + ${4:-10}))
    while [ "$SECONDS" -lt "$deadline" ]; do
        [ -s "$WORK/$1.events" ] && [ "$(events "$1" "$2" 2>/dev/null)" = "true" ] && return 0
        sleep 0.1
    done
    fail "$3 (stream $1: $(tail -5 "$WORK/$1.events" 2>/dev/null))"
}
# titles NAME: the titles of the items NAME received, joined by " | ".
titles() { events "$1" "' | '.join(i['content']['title'] for i in items)"; }
