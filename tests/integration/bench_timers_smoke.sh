#!/usr/bin/env bash
# `crier bench timers` with tiny numbers: it runs the engine in a child
# process for the delays and for both fan-outs, fires every delay timer once
# (as a release, nothing sent: the deliveries are parked at the paused
# endpoint), sends every digest once with all its items, prints one JSON object
# whose figures are present and plausible, and leaves no process or work
# directory behind.
. "$(dirname "$0")/../support/lib.sh"
new_db

start=$(date +%s)
TMPDIR="$WORK" "$CRIER_BIN" bench timers --timers 3000 --spread 0.5 --events 2000 --recipients 20 --keys 5 \
    --repeat 2 --json >"$WORK/out.json" 2>"$WORK/err.log" ||
    fail "bench timers failed: $(cat "$WORK/err.log")"
note "bench timers took $(($(date +%s) - start)) s: $(cat "$WORK/out.json")"

/usr/bin/python3 - "$WORK/out.json" <<'EOF' || fail "unexpected JSON: $(cat "$WORK/out.json")"
import json, sys
text = open(sys.argv[1]).read()
assert text.count("\n") == 1, "expected exactly one line"
o = json.loads(text)
for k in ("lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms", "fired_per_s", "floor_per_s",
          "fired_vs_floor", "offered_per_s", "all_fired_visible_s", "digest_events_per_s",
          "plain_events_per_s", "digest_vs_plain", "flush_s", "digests_flushed_per_s", "load_avg"):
    assert isinstance(o.get(k), (int, float)), "%s missing or not a number: %r" % (k, o.get(k))
for k in ("lateness_p99_ms", "fired_per_s", "floor_per_s", "digest_events_per_s", "plain_events_per_s",
          "flush_s"):
    assert o[k + "_min"] <= o[k] <= o[k + "_max"], (k, o)
    assert isinstance(o[k + "_spread_pct"], (int, float)), (k, o)
assert o["timers"] == 3000 and o["spread_s"] == 0.5 and o["timer_batch"] > 0, o
assert o["events"] == 2000 and o["recipients"] == 20 and o["digest_keys"] == 5 and o["digests"] == 100, o
assert o["runs"] == 2 and o["cpus"] >= 1 and isinstance(o["p99_target_met"], bool), o
# fired_at is the database's clock at the firing: never before the due time
assert 0 <= o["lateness_p50_ms"] <= o["lateness_p99_ms"] <= o["lateness_max_ms"] < 60000, o
assert 0 < o["fired_per_s"] < 1e7 and 0 < o["floor_per_s"] < 1e7, o
assert abs(o["fired_vs_floor"] - o["fired_per_s"] / o["floor_per_s"]) < 0.01, o
assert 0 < o["digest_events_per_s"] < 1e7 and 0 < o["plain_events_per_s"] < 1e7, o
assert 0 < o["flush_s"] < 60, o
EOF

# The last part run leaves its rows: every event in exactly one sent digest
# (or, when the plain fan-out ran last, one delivery per event), nothing sent.
digests=$(sql "SELECT count(*) FROM crier.digests")
if [ "$digests" -gt 0 ]; then
    assert_eq 100 "$(sql "SELECT count(*) FROM crier.digests WHERE state = 'sent' AND items = 20")" "sent digests"
    assert_eq 2000 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'digested'")" "digested items"
else
    assert_eq 2000 "$(sql "SELECT count(*) FROM crier.deliveries")" "plain deliveries"
fi
assert_eq 0 "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered' OR attempts > 0")" \
    "nothing sent: the deliveries are parked"

# Everything the bench started is gone: no work directory, no engine.
leftover=$(find "$WORK" -maxdepth 1 -name 'crier-bench-timers.*' | wc -l)
assert_eq 0 "$leftover" "work directories left behind"
sleep 0.2
assert_eq 0 "$(sql "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                    AND pid <> pg_backend_pid()")" "connections left open"
echo "ok"
