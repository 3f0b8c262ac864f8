#!/usr/bin/env bash
# GET /metrics after a mixed run equals the rows in the database, and a real
# Prometheus server scrapes it and answers PromQL about deliveries.
# The run: 8 "ok" events to a receiver answering 204 under a throttle of 5 (5
# delivered, 3 suppressed by the throttle); 3 "bad" events to one answering 500
# with one retry (3 attempts retried, 3 dead); "news" to 3 people by feed and
# webhook with stored preferences muting one's feed and another's webhooks;
# "note" events folded into a digest (a notification of its own); an event with
# an invalid payload quarantined, replayed, and quarantined again. The scraped
# text passes `promtool check metrics` (Debian's prometheus package).
. "$(dirname "$0")/../support/lib.sh"
command -v promtool >/dev/null || fail "promtool missing: scripts/install-deps installs Debian's prometheus"
command -v prometheus >/dev/null || fail "prometheus missing: scripts/install-deps installs Debian's prometheus"
new_db
start_receiver good
GOOD=$RECEIVER_URL
start_receiver bad --statuses 500
BAD=$RECEIVER_URL
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "ok" {}
crier.event_type "bad" {}
crier.event_type "news" {}
crier.event_type "note" {}
crier.event_type "strict" { payload = { n = "number" } }
crier.rule "ok" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = { url = crier.setting("good"), retry = { 0 }, throttle = { limit = 5, per = "1h" } },
}
crier.rule "bad" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = { url = crier.setting("bad"), retry = { 0, "1s" } },
}
crier.rule "news" {
    recipients = { "ann", "bob", "cid" },
    channels = { "feed", "webhook" },
    feed = { title = "news" },
    webhook = { url = crier.setting("good") },
}
crier.rule "note" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = { url = crier.setting("good"), digest = { window = "1s", key = "notes" } },
}
crier.rule "strict" { recipients = { "ops" }, channels = { "feed" }, feed = { title = "x" } }
LUA
sql "SELECT crier.set_preference('acme', 'ann', '*', 'feed', false), crier.set_preference('acme', 'bob', 'news', 'webhook', false)" >/dev/null
start_api serve --set "good=$GOOD" --set "bad=$BAD" --heartbeat 1s
sql "SELECT count(crier.emit('acme', 'ok', 'ok' || i)) FROM generate_series(1, 8) i" >/dev/null
sql "SELECT count(crier.emit('acme', 'bad', 'bad' || i)) FROM generate_series(1, 3) i" >/dev/null
sql "SELECT crier.emit('acme', 'news', 'n1')" >/dev/null
sql "SELECT count(crier.emit('acme', 'note', 'note' || i)) FROM generate_series(1, 4) i" >/dev/null
sql "SELECT crier.emit('acme', 'strict', 's1', '{\"n\": \"not a number\"}')" >/dev/null
wait_for "SELECT count(*) = 1 FROM crier.events WHERE state = 'dead'" 20 "the invalid event was quarantined"
"$CRIER_BIN" dead replay --events >/dev/null 2>&1 || fail "crier dead replay"
wait_for "SELECT (SELECT count(*) FROM crier.deliveries WHERE state NOT IN ('delivered', 'dead', 'suppressed', 'digested')) = 0
          AND (SELECT count(*) FROM crier.events WHERE state NOT IN ('done', 'dead')) = 0
          AND (SELECT count(*) FROM crier.digests WHERE state <> 'sent') = 0
          AND (SELECT count(*) FROM crier.deliveries WHERE state = 'dead') = 3
          AND (SELECT count(*) FROM crier.events WHERE state = 'dead') = 1" 40 "every delivery reached a final state"
assert_eq "dead|3
delivered|8
digested|4
suppressed|4" "$(sql "SELECT state, count(*) FROM crier.deliveries GROUP BY 1 ORDER BY state COLLATE \"C\"")" "the mixed run's rows"

curl -sf "$API/metrics" >"$WORK/metrics" || fail "GET /metrics"
promtool check metrics <"$WORK/metrics" >"$WORK/promtool.out" 2>&1 || true
# promtool exits 1 on lint warnings too (names, units): parse errors are what fail
if grep -v -e 'counter metrics should have "_total" suffix' -e 'no help text' "$WORK/promtool.out" | grep -q .; then
    fail "promtool check metrics: $(cat "$WORK/promtool.out")"
fi

# metric name + labels (as written) -> value, from the scraped text
m() { awk -v k="$1" '$1 == k { print $2 + 0 }' "$WORK/metrics"; }
n() { sql "$1"; }
assert_eq "$(n "SELECT count(*) FROM crier.events")" "$(m crier_events_accepted_total)" "events accepted"
assert_eq "$(n "SELECT count(*) FROM crier.events WHERE state = 'done'")" "$(m crier_events_fanned_out_total)" "events fanned out"
assert_eq 2 "$(m crier_events_quarantined_total)" "quarantined twice (before and after its replay)"
assert_eq 1 "$(m crier_events_replayed_total)" "replayed once"
assert_eq "$(n "SELECT count(*) FROM crier.notifications")" "$(m crier_notifications_created_total)" "notifications (digests' included)"
for o in delivered dead digested; do
    assert_eq "$(n "SELECT count(*) FROM crier.deliveries WHERE state = '$o'")" \
        "$(m "crier_deliveries_total{channel=\"webhook\",outcome=\"$o\"}")" "$o"
done
assert_eq "$(n "SELECT count(*) FROM crier.delivery_attempts WHERE outcome = 'retry'")" \
    "$(m 'crier_deliveries_total{channel="webhook",outcome="retried"}')" "retried"
assert_eq 3 "$(m 'crier_deliveries_total{channel="webhook",outcome="retried"}')" "three retries"
assert_eq "$(n "SELECT count(*) FROM crier.deliveries WHERE state = 'suppressed' AND last_error LIKE 'throttled:%'")" \
    "$(m 'crier_notifications_suppressed_total{channel="webhook",reason="throttle"}')" "suppressed by the throttle"
assert_eq 1 "$(m 'crier_notifications_suppressed_total{channel="webhook",reason="preference"}')" "bob's webhook"
assert_eq 1 "$(m 'crier_notifications_suppressed_total{channel="feed",reason="preference"}')" "ann's feed item"
assert_eq "$(n "SELECT count(*) FROM crier.events WHERE state = 'done'")" \
    "$(m 'crier_fanout_latency_seconds_bucket{le="+Inf"}')" "commit->fan-out histogram counts every event"
assert_eq "$(m 'crier_fanout_latency_seconds_count')" "$(m 'crier_fanout_latency_seconds_bucket{le="+Inf"}')" \
    "a histogram's count is its +Inf bucket"
# a bucket's label: the smallest bound >= the observation (a bound itself
# falls in its own bucket), +Inf above the last
assert_eq "0.001 0.001 0.005 0.005 0.01 1800 +Inf +Inf" \
    "$(n "SELECT string_agg(crier.metric_le(s), ' ' ORDER BY k) FROM unnest(ARRAY[-1, 0.001, 0.0011, 0.005,
          0.0050001, 1800, 1800.5, 1e9]::float8[]) WITH ORDINALITY AS t(s, k)")" "bucket labels (crier.metric_le)"
n "SELECT crier.metrics_sent(ARRAY['crier-test'], ARRAY['retry'], ARRAY[250]::float8[], ARRAY[NULL]::timestamptz[])" >/dev/null
assert_eq 1 "$(n "SELECT value FROM crier.metric_counters WHERE metric = 'crier_send_duration_seconds_bucket'
                  AND value1 = 'crier-test' AND value2 = '0.25'")" \
    "an observation equal to a bound counts in that bound's bucket"
n "DELETE FROM crier.metric_counters WHERE value1 = 'crier-test'" >/dev/null
assert_eq 8 "$(m 'crier_delivery_latency_seconds_count{channel="webhook"}')" "commit->delivered histogram"
# commit -> delivered is measured from the event's commit: each delivery carries it
# (deliveries.emitted_at), and the histogram's sum is that of delivered_at - the event's created_at
assert_eq 0 "$(n "SELECT count(*) FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                  JOIN crier.events e ON e.id = n.event_id WHERE d.emitted_at IS DISTINCT FROM e.created_at")" \
    "every delivery carries its event's commit time"
assert_eq "$(n "SELECT round(sum(extract(epoch FROM d.delivered_at - e.created_at))::numeric, 3)
                FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
                JOIN crier.events e ON e.id = n.event_id WHERE d.channel = 'webhook' AND d.state = 'delivered'")" \
    "$(awk '$1 == "crier_delivery_latency_seconds_sum{channel=\"webhook\"}" { printf "%.3f", $2 }' "$WORK/metrics")" \
    "commit->delivered sum"
assert_eq "$(n "SELECT count(*) FROM crier.delivery_attempts WHERE outcome <> 'released'")" \
    "$(m 'crier_send_duration_seconds_count{channel="webhook"}')" "send duration histogram"
# buckets are cumulative: never decreasing along the bounds
awk '$1 ~ /^crier_send_duration_seconds_bucket/ { if ($2 + 0 < last) bad = 1; last = $2 + 0 } END { exit bad }' \
    "$WORK/metrics" || fail "buckets decrease: $(grep send_duration "$WORK/metrics")"
assert_eq 1 "$(m 'crier_workers{state="alive"}')" "one live worker"

# A real Prometheus scrapes it and answers PromQL.
PROM_PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$WORK/prometheus.yml" <<YML
global: { scrape_interval: 1s }
scrape_configs:
  - job_name: crier
    static_configs: [ { targets: [ "${API#http://}" ] } ]
YML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/prom" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
q='sum(crier_deliveries_total{outcome="delivered"})'
got=""
for _ in $(seq 150); do
    got=$(curl -sf --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$q" |
        /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null || true)
    [ "$got" = 8 ] && break
    sleep 0.2
done
assert_eq 8 "$got" "Prometheus answers $q (log: $(tail -3 "$WORK/prometheus.log"))"

# The counters of database backends that are gone are folded into shard 0 by
# the next worker's heartbeat, their totals kept.
totals="SELECT string_agg(metric || label1 || value1 || label2 || value2 || '=' || round(v::numeric, 6), ' '
                  ORDER BY metric, label1, value1, label2, value2)
        FROM (SELECT metric, label1, value1, label2, value2, sum(value) AS v FROM crier.metric_counters
              GROUP BY 1, 2, 3, 4, 5) s"
before=$(sql "$totals")
stop_serve
start_api serve2 --set "good=$GOOD" --set "bad=$BAD" --heartbeat 1s
wait_for "SELECT count(*) FILTER (WHERE shard = 0) > 0 AND count(*) FILTER (WHERE shard <> 0 AND NOT EXISTS
          (SELECT 1 FROM pg_stat_activity a WHERE a.pid = shard)) = 0 FROM crier.metric_counters" 20 \
    "the stopped worker's shards folded into shard 0"
assert_eq "$before" "$(sql "$totals")" "folding keeps every total"
echo "ok"
