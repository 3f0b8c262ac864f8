#!/usr/bin/env bash
# `crier bench deliver` with tiny numbers: it starts nginx and crier serve,
# runs the throughput, floor and latency phases, prints one JSON object whose
# figures are present and plausible, and leaves no process or work directory
# behind.
. "$(dirname "$0")/../support/lib.sh"
new_db

[ -x /usr/sbin/nginx ] || fail "/usr/sbin/nginx is missing (scripts/install-deps installs Debian's nginx)"

start=$(date +%s)
TMPDIR="$WORK" "$CRIER_BIN" bench deliver --deliveries 600 --recipients 3 --delivery-batch 50 \
    --rate 50 --seconds 1 --json >"$WORK/out.json" 2>"$WORK/err.log" ||
    fail "bench deliver failed: $(cat "$WORK/err.log")"
note "bench deliver took $(($(date +%s) - start)) s: $(cat "$WORK/out.json")"

/usr/bin/python3 - "$WORK/out.json" <<'EOF' || fail "unexpected JSON: $(cat "$WORK/out.json")"
import json, sys
text = open(sys.argv[1]).read()
assert text.count("\n") == 1, "expected exactly one line"
o = json.loads(text)
for k in ("deliveries_per_s", "floor_per_s", "ratio", "p50_ms", "p99_ms", "max_ms", "receiver_per_s",
          "deliveries_per_s_min", "deliveries_per_s_max", "floor_per_s_min", "floor_per_s_max",
          "p99_ms_min", "p99_ms_max", "emit_per_s"):
    assert isinstance(o.get(k), (int, float)), "%s missing or not a number: %r" % (k, o.get(k))
assert o["deliveries"] == 600 and o["recipients"] == 3, o
assert o["latency_events"] == 50 and o["rate"] == 50 and o["runs"] == 1, o
assert 0 < o["deliveries_per_s"] < 1e6 and 0 < o["floor_per_s"] < 1e7, o
assert abs(o["ratio"] - o["deliveries_per_s"] / o["floor_per_s"]) < 0.01, o
assert o["deliveries_per_s_min"] <= o["deliveries_per_s"] <= o["deliveries_per_s_max"], o
# $msec has millisecond resolution: a latency may read up to 1 ms low.
assert -1.0 <= o["p50_ms"] <= o["p99_ms"] <= o["max_ms"] < 10000, o
assert 0 < o["emit_per_s"] <= 60, o
# the stages, each alone: none may exceed the whole's max, and each p50 <= its p99
for st in ("to_fanout", "to_send", "http"):
    p50, p99 = o.get("stage_%s_p50_ms" % st), o.get("stage_%s_p99_ms" % st)
    assert isinstance(p50, (int, float)) and isinstance(p99, (int, float)), (st, o)
    assert 0 <= p50 <= p99 <= o["max_ms"] + 1.0, (st, o)
EOF

# Everything the bench started is gone: no work directory, no nginx, no serve.
leftover=$(find "$WORK" -maxdepth 1 -name 'crier-bench-deliver.*' | wc -l)
assert_eq 0 "$leftover" "work directories left behind"
if pgrep -f "$WORK/crier-bench-deliver" >/dev/null; then
    fail "an nginx or crier serve of the bench is still running"
fi
# The bench left its rows in the test database, all delivered.
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state <> 'delivered'")" "undelivered rows"
echo "ok"
