#!/usr/bin/env bash
# How each kind of webhook answer is handled, through real `crier serve`
# processes and real HTTP receivers: retried, dead at once, endpoint paused,
# SSRF guard; every attempt recorded.
. "$(dirname "$0")/../support/lib.sh"
new_db

# 500 then 200: delivered once, two attempts recorded, the same webhook-id twice.
start_receiver flaky --statuses 500,200
ping_serve s1 "$RECEIVER_URL"
ping p500
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'delivered'" 20 "500-then-200 delivered"
stop_serve
assert_eq 2 "$(requests_at "$RECEIVER_LOG")" "requests for 500-then-200"
assert_eq 1 "$(receiver_ids | sort -u | wc -l)" "distinct webhook-ids for 500-then-200"
assert_eq "1|retry|500
2|delivered|200" "$(sql "SELECT attempt, outcome, status FROM crier.delivery_attempts ORDER BY attempt")" \
    "attempts of 500-then-200"
assert_eq 2 "$(delivery_of p500 attempts)" "attempts column"

# The receiver hangs past the timeout: retried with the same webhook-id.
start_receiver slow --delays-ms 3000,0
ping_serve s2 "$RECEIVER_URL" --timeout-ms 1000
ping hang
wait_for "SELECT state = 'delivered' FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id = 'hang'" 20 "hanging receiver eventually delivered"
stop_serve
assert_eq 2 "$(requests_at "$RECEIVER_LOG")" "requests for the hang"
assert_eq 1 "$(receiver_ids | sort -u | wc -l)" "the retry after a timeout carries the same webhook-id"
first_error=$(sql "SELECT a.error FROM crier.delivery_attempts a JOIN crier.deliveries d ON d.id = a.delivery_id
                   JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id = 'hang' AND a.attempt = 1")
case "$first_error" in *[Tt]imeout* | *timed\ out*) ;; *) fail "first attempt error should say timeout: $first_error" ;; esac

# 400: dead at once, with the response excerpt.
start_receiver bad --statuses 400 --body '{"error":"field amount is not a number"}'
ping_serve s3 "$RECEIVER_URL"
ping p400
wait_for "SELECT count(*) = 1 FROM crier.deliveries WHERE state = 'dead'" 20 "400 is dead"
stop_serve
assert_eq 1 "$(requests_at "$RECEIVER_LOG")" "one request for a 400"
assert_eq 1 "$(delivery_of p400 attempts)" "a 400 is not retried"
assert_eq 400 "$(delivery_of p400 last_status)" "last status of the 400"
excerpt=$(sql "SELECT response_excerpt FROM crier.delivery_attempts a JOIN crier.deliveries d ON d.id = a.delivery_id
               JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id = 'p400'")
assert_eq '{"error":"field amount is not a number"}' "$excerpt" "response excerpt of the 400"

# 410: the delivery dies and the endpoint is paused; the next ping waits
# (parked, not attempted) instead of being sent.
start_receiver gone --statuses 410
ping_serve s4 "$RECEIVER_URL" --probe-interval 1h
ping p410
wait_for "SELECT count(*) = 1 FROM crier.endpoints WHERE state = 'paused' AND target = '$RECEIVER_URL'" 20 \
    "410 pauses the endpoint"
ping after410
wait_for "SELECT state = 'paused' FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id = 'after410'" 20 "a delivery to a paused endpoint waits"
stop_serve
assert_eq 1 "$(requests_at "$RECEIVER_LOG")" "only the 410 request reached the paused endpoint"
assert_eq dead "$(delivery_of p410 state)" "the 410 delivery"
assert_eq 0 "$(delivery_of after410 attempts)" "no attempt spent while paused"
grep -q "endpoint paused" "$WORK/s4.log" || fail "pausing is logged: $(cat "$WORK/s4.log")"

# 429 with Retry-After: the next attempt waits as asked.
start_receiver busy --statuses 429,204 --retry-after 2
ping_serve s5 "$RECEIVER_URL"
ping p429
wait_for "SELECT count(*) = 1 FROM crier.delivery_attempts a JOIN crier.deliveries d ON d.id = a.delivery_id
          JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id = 'p429'" 20 "429 attempted"
assert_eq t "$(sql "SELECT d.due_at - now() > interval '1 second' FROM crier.deliveries d
                    JOIN crier.notifications n ON n.id = d.notification_id WHERE n.entity_id = 'p429'")" \
    "Retry-After: 2 schedules the retry about 2 s later"
wait_for "SELECT state = 'delivered' FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id = 'p429'" 20 "429 then delivered"
stop_serve

# The SSRF guard: without --allow-targets loopback, a loopback target is refused
# before any byte is sent, and the delivery is dead with an error saying so.
start_receiver guarded
CRIER_ALLOW_TARGETS=none ping_serve s6 "$RECEIVER_URL"
ping guarded
wait_for "SELECT state = 'dead' FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id = 'guarded'" 20 "a loopback target is refused"
stop_serve
assert_eq 0 "$(requests_at "$RECEIVER_LOG")" "nothing reached the refused target"
case "$(delivery_of guarded last_error)" in *loopback*allow-targets*) ;;
*) fail "the refusal says what to do: $(delivery_of guarded last_error)" ;; esac
echo "ok"
