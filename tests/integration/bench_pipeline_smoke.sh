#!/usr/bin/env bash
# `crier bench pipeline` with tiny numbers: it starts its own private cluster
# (pg_stat_statements loaded) and `crier serve` workers, prints one JSON
# object whose figures are present and plausible (1 and 2 workers, statement
# shares), and leaves no process or work directory behind; then once with
# --send against its local receiver, and once on an existing database
# (--database: the test database, where pg_stat_statements is not loaded; with
# --rule-loop).
. "$(dirname "$0")/../support/lib.sh"
new_db

check() { # file mode workers stats
    /usr/bin/python3 - "$@" <<'PY' || fail "unexpected JSON: $(cat "$1")"
import json, sys
path, mode, workers, stats = sys.argv[1], sys.argv[2], [int(w) for w in sys.argv[3].split(",")], sys.argv[4] == "1"
text = open(path).read()
assert text.count("\n") == 1, "expected exactly one line"
o = json.loads(text)
assert o["mode"] == mode and o["events"] == 300 and o["recipients"] == 3 and o["rows"] == 1800 and o["runs"] == 1, o
assert o["statement_stats"] is stats, o
for k in ("crier_rows_per_s", "copy_rows_per_s", "ratio"):
    assert isinstance(o[k], (int, float)) and o[k] > 0, (k, o)
assert [w["workers"] for w in o["by_workers"]] == workers, o
for w in o["by_workers"]:
    assert 0 < w["crier_rows_per_s"] < 1e7 and 0 < w["copy_rows_per_s"] < 1e8, w
    assert abs(w["ratio"] - w["crier_rows_per_s"] / w["copy_rows_per_s"]) < 0.01 * w["ratio"] + 0.001, w
    assert w["crier_rows_per_s_min"] <= w["crier_rows_per_s"] <= w["crier_rows_per_s_max"], w
    if mode == "send":
        assert w["delivered_per_s"] > 0, w
    if stats:
        assert w["statements"], w
        shares = [s["share"] for s in w["statements"]]
        assert all(0 <= s <= 1 for s in shares) and sum(shares) <= 1.001, w
        # the fan-out's write statement is among the statements the server ran
        assert any("crier fan-out write" in s["query"] for s in w["statements"]), w
    else:
        assert w["statements"] == [] and w["db_busy_per_worker"] is None, w
PY
}

run() { # name args...
    local name=$1
    shift
    local start
    start=$(date +%s)
    TMPDIR="$WORK" "$CRIER_BIN" bench pipeline --events 300 --recipients 3 --batch-size 50 --repeat 1 --json "$@" \
        >"$WORK/$name.json" 2>"$WORK/$name.err" || fail "bench pipeline $* failed: $(cat "$WORK/$name.err")"
    note "bench pipeline $* took $(($(date +%s) - start)) s: $(cat "$WORK/$name.json")"
}

run parked
check "$WORK/parked.json" parked 1,2 1
run send --send --workers 1
check "$WORK/send.json" send 1 1
# (with a rule that costs CPU: the generated rule's loop must load and run)
run existing --database "$CRIER_DATABASE_URL" --workers 2 --rule-loop 1000
check "$WORK/existing.json" parked 2 0
if "$CRIER_BIN" bench pipeline --rule-loop -1 >/dev/null 2>"$WORK/bad.err"; then
    fail "--rule-loop -1 was accepted"
fi
grep -q "rule-loop" "$WORK/bad.err" || fail "--rule-loop -1: the error does not name the option: $(cat "$WORK/bad.err")"

# Everything the bench started is gone: no work directory, no cluster, no serve.
leftover=$(find "$WORK" -maxdepth 1 -name 'crier-bench-pipeline.*' | wc -l)
assert_eq 0 "$leftover" "work directories left behind"
if pgrep -f "$WORK/crier-bench-pipeline" >/dev/null; then
    fail "a server or crier serve of the bench is still running"
fi
# On the existing database the bench left crier's rows, every event done.
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE state <> 'done'")" "events not done"
assert_eq 900 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'pending'")" "parked deliveries"
echo "ok"
