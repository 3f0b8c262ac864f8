#!/usr/bin/env bash
# crier.emit is the outbox: a duplicate emit is one event, bad input is refused
# and changes nothing; crier migrate is safe twice and from two processes at once.
. "$(dirname "$0")/../support/lib.sh"
new_db

note "migrate again, and from two processes at once"
out=$("$CRIER_BIN" migrate)
case "$out" in *"up to date"*) ;; *) fail "second migrate should say it is up to date, said: $out" ;; esac
base=$("$CRIER_BIN" cluster url "$CRIER_TEST_PG")
psql -XAtq "$base" -c "CREATE DATABASE t_emit_concurrent_migrate" >/dev/null 2>&1 || true
psql -XAtq "$base" -c "DROP DATABASE IF EXISTS t_emit_concurrent_migrate2 WITH (FORCE)" >/dev/null
psql -XAtq "$base" -c "CREATE DATABASE t_emit_concurrent_migrate2" >/dev/null
url2="$base dbname=t_emit_concurrent_migrate2"
"$CRIER_BIN" migrate --database "$url2" >"$WORK/m1.out" 2>&1 &
p1=$!
"$CRIER_BIN" migrate --database "$url2" >"$WORK/m2.out" 2>&1 &
p2=$!
wait $p1 || fail "concurrent migrate 1 failed: $(cat "$WORK/m1.out")"
wait $p2 || fail "concurrent migrate 2 failed: $(cat "$WORK/m2.out")"
applied=$(cat "$WORK/m1.out" "$WORK/m2.out" | grep -c '^applied 001_init.sql' || true)
assert_eq 1 "$applied" "exactly one of two concurrent migrators applies 001_init.sql"

note "a duplicate crier.emit is one event"
id1=$(sql "SELECT crier.emit('acme', 'invoice.created', 'inv_1', '{\"invoice_id\":\"inv_1\",\"amount_cents\":100,\"currency\":\"EUR\"}')")
id2=$(sql "SELECT crier.emit('acme', 'invoice.created', 'inv_1', '{\"invoice_id\":\"inv_1\",\"amount_cents\":100,\"currency\":\"EUR\"}')")
assert_eq "$id1" "$id2" "same natural key, no dedupe key: same event id"
id3=$(sql "SELECT crier.emit('acme', 'invoice.created', 'inv_2', '{}', 'job-9')")
id4=$(sql "SELECT crier.emit('acme', 'invoice.created', 'inv_2', '{}', 'job-9')")
assert_eq "$id3" "$id4" "same dedupe key: same event id"
id5=$(sql "SELECT crier.emit('globex', 'invoice.created', 'inv_1', '{}')")
[ "$id5" != "$id1" ] || fail "another tenant's event with the same natural key must be a different event"
assert_eq 3 "$(sql "SELECT count(*) FROM crier.events")" "events stored"

note "the duplicate inside the caller's own transaction, and rolled back with it"
out=$(psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 <<'SQL'
BEGIN;
SELECT crier.emit('acme', 'invoice.created', 'inv_3', '{}') = crier.emit('acme', 'invoice.created', 'inv_3', '{}');
ROLLBACK;
SQL
)
assert_eq t "$out" "two emits in one transaction return the same id"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'inv_3'")" "a rolled-back emit leaves nothing"

note "concurrent duplicate emits from 8 sessions are one event"
for i in $(seq 8); do
    psql -XAtq "$CRIER_DATABASE_URL" -c "SELECT crier.emit('acme', 'invoice.created', 'inv_race', '{}')" >"$WORK/race.$i" &
done
wait
assert_eq 1 "$(sort -u "$WORK"/race.* | wc -l)" "every concurrent emit returned the same id"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.events WHERE entity_id = 'inv_race'")" "one row"

note "the emit wakes a sleeping daemon (NOTIFY crier_events), and only a sleeping one"
# A daemon announces that it sleeps by holding the advisory lock (1668442469, 1)
# (src/engine/wake.h); this session plays that daemon.
psql -XAtq "$CRIER_DATABASE_URL" -c "SELECT pg_advisory_lock(1668442469, 1)" -c "SELECT pg_sleep(60)" \
    >/dev/null 2>&1 &
sleeper=$!
PIDS+=("$sleeper")
wait_for "SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 1668442469
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND objid = 1 AND mode = 'ExclusiveLock' AND granted" 30 "the sleep lock was not taken"
out=$(psql -XAtq "$CRIER_DATABASE_URL" <<'SQL'
LISTEN crier_events;
SELECT crier.emit('acme', 'invoice.created', 'inv_notify', '{}');
SQL
)
case "$out" in *'notification "crier_events"'*) ;; *) fail "no NOTIFY after emit while asleep: $out" ;; esac
sql "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1668442469
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())" >/dev/null
wait "$sleeper" 2>/dev/null || true
wait_for "SELECT count(*) = 0 FROM pg_locks WHERE locktype = 'advisory' AND classid = 1668442469
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())" 30 \
    "the sleep lock was not released"
out=$(psql -XAtq "$CRIER_DATABASE_URL" <<'SQL'
LISTEN crier_events;
SELECT crier.emit('acme', 'invoice.created', 'inv_notify_awake', '{}');
SQL
)
case "$out" in *'notification "crier_events"'*) fail "an emit notified although no daemon sleeps: $out" ;; esac

note "bad input is refused with a clear error and changes nothing"
before=$(sql "SELECT count(*) FROM crier.events")
for args in "'', 'invoice.created', 'x', '{}'" "'acme', 'bad type; DROP TABLE x', 'x', '{}'" \
    "'acme', 'invoice.created', '', '{}'" "'acme', 'invoice.created', 'x', '[1,2]'" \
    "'acme', 'invoice.created', 'x', '{}', ''"; do
    if err=$(sql "SELECT crier.emit($args)" 2>&1); then
        fail "crier.emit($args) should be refused"
    fi
    case "$err" in *"crier.emit:"*) ;; *) fail "unclear error for crier.emit($args): $err" ;; esac
done
if err=$(sql "SELECT crier.emit('acme','invoice.created','big', jsonb_build_object('x', repeat('a', 300000)))" 2>&1); then
    fail "an oversized payload should be refused"
fi
case "$err" in *"limit is 262144"*) ;; *) fail "unclear oversize error: $err" ;; esac
assert_eq "$before" "$(sql "SELECT count(*) FROM crier.events")" "refused emits stored nothing"

note "hostile strings in ids are stored literally"
id=$(sql "SELECT crier.emit('acme', 'invoice.created', 'inv''); DROP TABLE crier.events; --', '{}')")
assert_eq "inv'); DROP TABLE crier.events; --" "$(sql "SELECT entity_id FROM crier.events WHERE id = $id")" "literal id"

note "crier emit validates against the rules"
if err=$("$CRIER_BIN" emit --tenant acme --type no.such.type --entity x 2>&1); then
    fail "crier emit of an unknown event type should fail"
fi
case "$err" in *"no.such.type"*) ;; *) fail "unclear unknown-type error: $err" ;; esac
if err=$("$CRIER_BIN" emit --tenant acme --type invoice.created --entity x --payload '{"invoice_id": 5}' 2>&1); then
    fail "crier emit with a payload that fails the schema should fail"
fi
if err=$("$CRIER_BIN" emit --tenant acme --type invoice.created --entity x --payload '{not json' 2>&1); then
    fail "crier emit with malformed JSON should fail"
fi
assert_eq "$before" "$(($(sql "SELECT count(*) FROM crier.events") - 1))" "refused crier emit calls stored nothing"
id=$("$CRIER_BIN" emit --tenant acme --type invoice.created --entity inv_cli \
    --payload '{"invoice_id":"inv_cli","amount_cents":5,"currency":"EUR"}')
id_again=$("$CRIER_BIN" emit --tenant acme --type invoice.created --entity inv_cli \
    --payload '{"invoice_id":"inv_cli","amount_cents":5,"currency":"EUR"}')
assert_eq "$id" "$id_again" "crier emit twice: same id"
echo "ok"
