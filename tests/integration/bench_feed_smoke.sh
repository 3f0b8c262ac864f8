#!/usr/bin/env bash
# `crier bench feed` with tiny numbers: it builds its dataset (exact sizes,
# counts that agree with the feed), starts crier serve, times every operation
# over HTTP and SQL, prints one JSON object whose figures are present and
# plausible, reuses the dataset on a second run, puts the states back as it
# built them, prints plans with --explain, and leaves no process or work
# directory behind.
. "$(dirname "$0")/../support/lib.sh"
new_db

sizes=(--people 1000 --notifications 5000 --audience-items 100 --deep 100 --deep-people 1)
start=$(date +%s)
TMPDIR="$WORK" "$CRIER_BIN" bench feed "${sizes[@]}" --requests 20 --repeat 2 --json \
    >"$WORK/out.json" 2>"$WORK/err.log" || fail "bench feed failed: $(cat "$WORK/err.log")"
note "bench feed took $(($(date +%s) - start)) s: $(cat "$WORK/out.json")"
grep -q "building the dataset" "$WORK/err.log" || fail "the first run builds: $(cat "$WORK/err.log")"

/usr/bin/python3 - "$WORK/out.json" <<'EOF' || fail "unexpected JSON: $(cat "$WORK/out.json")"
import json, sys
text = open(sys.argv[1]).read()
assert text.count("\n") == 1, "expected exactly one line"
o = json.loads(text)
for op in ("first_page", "deep_page", "unread_count", "heavy_unread_count", "mark_all_read"):
    for k in (op + "_p50_ms", op + "_p99_ms", "sql_" + op + "_p50_ms", "sql_" + op + "_p99_ms",
              op + "_p99_ms_min", op + "_p99_ms_max", op + "_p50_ratio", op + "_p99_ratio"):
        assert isinstance(o.get(k), (int, float)), "%s missing or not a number: %r" % (k, o.get(k))
    assert 0 < o[op + "_p50_ms"] <= o[op + "_p99_ms"] < 10000, (op, o)
    assert 0 < o["sql_" + op + "_p50_ms"] <= o["sql_" + op + "_p99_ms"] < 10000, (op, o)
    assert o[op + "_p99_ms_min"] <= o[op + "_p99_ms"] <= o[op + "_p99_ms_max"], (op, o)
    # the ratio is of the unrounded times: allow for the rounding of all three printed figures
    # (times to 0.001 ms, the ratio to 0.01; 1.734 / 0.377 = 4.5995 was printed as 4.61)
    p50, sql50 = o[op + "_p50_ms"], o["sql_" + op + "_p50_ms"]
    slack = 0.005 + (p50 / sql50) * (0.0005 / p50 + 0.0005 / sql50) + 1e-9
    assert abs(o[op + "_p50_ratio"] - p50 / sql50) <= slack, (op, slack, o)
assert o["people"] == 1000 and o["notifications"] == 5000 and o["audience_items"] == 100, o
assert o["requests"] == 20 and o["runs"] == 2 and o["clients"] == 1 and o["deep_items"] == 100, o
assert isinstance(o["load_avg"], (int, float)) and isinstance(o["first_page_target_met"], bool), o
assert isinstance(o["dataset_build_s"], (int, float)), o
EOF

# The dataset: exact sizes, every feed item behind a notification and event.
assert_eq 5000 "$(sql "SELECT count(*) FROM crier.feed_items f JOIN crier.notifications n
                       ON n.id = f.notification_id JOIN crier.events e ON e.id = n.event_id")" "feed items"
assert_eq 100 "$(sql "SELECT count(*) FROM crier.audience_items")" "audience items"
assert_eq 1000 "$(sql "SELECT count(DISTINCT recipient_id) FROM crier.memberships WHERE audience = 'all'")" \
    "everyone in the tenant-wide audience"
[ "$(sql "SELECT count(*) FROM crier.feed_watermarks")" -gt 0 ] || fail "no watermarks"
[ "$(sql "SELECT count(*) FROM crier.feed_states WHERE read = false")" -gt 0 ] || fail "no explicit unread marks"
[ "$(sql "SELECT count(*) FROM crier.feed_items WHERE recipient_id = 'p0'")" -gt 500 ] || fail "p0 is not heavy"
# The counts agree with the feed (a heavy person, a person with a watermark).
for who in p0 "$(sql "SELECT recipient_id FROM crier.feed_watermarks ORDER BY recipient_id LIMIT 1")"; do
    assert_eq "$(sql "SELECT count(*) FILTER (WHERE NOT read) || '|' || count(*) FILTER (WHERE NOT seen)
                      FROM crier.feed('bench', '$who', NULL, 100000)")" \
        "$(sql "SELECT unread || '|' || unseen FROM crier.feed_counts('bench', '$who')")" "$who's counts"
done
# mark-all-read ran during the bench; the states are back as built.
for t in feed_states feed_watermarks; do # (pg_snapshot has no equality: compare text)
    assert_eq "$(sql "SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM crier_bench_feed.${t}0 t")" \
        "$(sql "SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM crier.$t t")" "crier.$t as built"
done

# A second run with the same sizes reuses the dataset; --explain prints plans.
TMPDIR="$WORK" "$CRIER_BIN" bench feed "${sizes[@]}" --explain >"$WORK/explain.txt" 2>"$WORK/err2.log" ||
    fail "bench feed --explain failed: $(cat "$WORK/err2.log")"
grep -q "reusing the dataset" "$WORK/err2.log" || fail "the second run reuses: $(cat "$WORK/err2.log")"
for what in "first page" "deep page" "unread count" "mark all read"; do
    grep -q "^=== .*: $what" "$WORK/explain.txt" || fail "--explain: no $what"
done
[ "$(grep -c '^duration: .* plan:' "$WORK/explain.txt")" -gt 10 ] || fail "--explain printed few plans"
grep -q "UPDATE crier.feed_states" "$WORK/explain.txt" || fail "--explain: no nested statement of mark-all"

# Everything the bench started is gone: no work directory, no serve.
leftover=$(find "$WORK" -maxdepth 1 -name 'crier-bench-feed.*' | wc -l)
assert_eq 0 "$leftover" "work directories left behind"
if pgrep -f "$WORK/crier-bench-feed" >/dev/null; then
    fail "a crier serve of the bench is still running"
fi
echo "ok"
