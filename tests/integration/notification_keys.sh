#!/usr/bin/env bash
# The shared key vectors (tests/vectors/notification_keys.tsv) in PostgreSQL:
# every row's message id as crier.api_notification computes it from the key
# hash, its readable key's escaping beside crier.natural_key's, and, for every
# row a rule can produce, the real daemon's fan-out end to end: the stored key
# hash, key and delivery message id, and the webhook-id a receiver gets; and
# the lock key (crier.event_lock_key) that the fan-out's claim takes.
. "$(dirname "$0")/../support/lib.sh"
new_db

VECTORS="$CRIER_SOURCE_DIR/tests/vectors/notification_keys.tsv"
COLUMNS="tenant, event_type, entity_id, recipient_id, discriminator, key, key_hash, message_id, lock_key"

# psql_script: runs the SQL script on stdin against the test database.
psql_script() {
    psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1
}

# The file as PostgreSQL itself decodes it (COPY text format, header checked).
sql "CREATE TABLE public.vectors (n int GENERATED ALWAYS AS IDENTITY, tenant text, event_type text,
     entity_id text, recipient_id text, discriminator text, key text, key_hash text, message_id text,
     lock_key bigint)"
grep -v '^#' "$VECTORS" | psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 \
    -c "COPY public.vectors ($COLUMNS) FROM STDIN WITH (FORMAT text, HEADER MATCH)" ||
    fail "cannot load $VECTORS"
rows=$(sql "SELECT count(*) FROM public.vectors")
[ "$rows" -ge 44 ] || fail "$VECTORS has $rows rows, expected at least 44"
note "$rows vectors"
# The rows a rule can plan: an event type crier.emit accepts, and not the
# empty discriminator (a rule's "" means none).
sql "CREATE VIEW public.plannable AS SELECT * FROM public.vectors
     WHERE event_type ~ '^[A-Za-z0-9_.-]{1,200}\$' AND discriminator IS DISTINCT FROM ''"

# The SQL computation of the message id (crier.api_notification) on every row,
# from notifications stored with the row's key hash; rolled back.
bad=$(psql_script <<SQL
BEGIN;
INSERT INTO crier.events (tenant, event_type, entity_id, dedupe_key)
SELECT tenant, event_type, entity_id, 'vector/' || n FROM public.vectors ORDER BY n;
INSERT INTO crier.notifications (key_hash, key, tenant, event_id, event_type, entity_id, recipient_id,
                                 discriminator)
SELECT v.key_hash::uuid, v.key, v.tenant, e.id, v.event_type, v.entity_id, v.recipient_id, v.discriminator
FROM public.vectors v JOIN crier.events e ON e.tenant = v.tenant AND e.dedupe_key = 'vector/' || v.n;
SELECT 'row ' || v.n || ': api_notification gives ' || coalesce(a.doc ->> 'message_id', 'nothing')
       || ', expected ' || v.message_id
FROM public.vectors v
JOIN crier.notifications n ON n.key_hash = v.key_hash::uuid
CROSS JOIN LATERAL (SELECT crier.api_notification(v.tenant, n.id)::jsonb AS doc) a
WHERE (a.doc ->> 'message_id') IS DISTINCT FROM v.message_id OR n.key_hash::text <> v.key_hash
ORDER BY v.n;
SELECT 'missing rows: ' || ($rows - count(*)) FROM crier.notifications HAVING count(*) <> $rows;
ROLLBACK;
SQL
)
[ -z "$bad" ] || fail "message ids computed in SQL differ from the vectors:
$bad"

# crier.event_lock_key (the advisory lock the fan-out's claim takes per event)
# gives every row's lock key, as crier_key_lock does in C.
bad=$(sql "SELECT string_agg('row ' || n || ': ' || crier.event_lock_key(tenant, event_type, entity_id), ', ' ORDER BY n)
           FROM public.vectors WHERE crier.event_lock_key(tenant, event_type, entity_id) <> lock_key")
[ -z "$bad" ] || fail "lock keys computed in SQL differ from the vectors: $bad"

# crier.natural_key (the default dedupe key) escapes ':' and '\' like the
# readable key, which starts with it.
bad=$(sql "SELECT string_agg(n::text, ', ' ORDER BY n) FROM public.vectors
           WHERE NOT starts_with(key, crier.natural_key(event_type, entity_id) || ':')")
[ -z "$bad" ] || fail "readable keys that do not start with crier.natural_key: rows $bad"

# End to end: one rule per event type, recipient and discriminator from the
# payload, one webhook each to a real receiver.
start_receiver hooks
mkdir -p "$WORK/rules"
{
    echo '-- Rules of the key vectors: each event names its recipient and discriminator.'
    echo 'local crier = require "crier"'
    echo 'local url = crier.setting("keys_url")'
    sql "SELECT DISTINCT event_type FROM public.plannable ORDER BY 1" | while read -r type; do
        cat <<LUA
crier.event_type "$type" { payload = { recipient = "string", discriminator = "string?" } }
crier.rule "$type" {
    recipients = function(event) return { event.payload.recipient } end,
    discriminator = function(event) return event.payload.discriminator end,
    channels = { "webhook" },
    webhook = { url = url, body = function(event, recipient) return { to = recipient.id } end },
}
LUA
    done
} >"$WORK/rules/keys.lua"
planned=$(sql "SELECT count(*) FROM public.plannable")
[ "$planned" -ge 30 ] || fail "only $planned vectors can go through the engine"
sql "SELECT count(crier.emit(tenant, event_type, entity_id,
                             jsonb_strip_nulls(jsonb_build_object('recipient', recipient_id,
                                                                  'discriminator', discriminator)),
                             'vector/' || n))
     FROM public.plannable" >/dev/null
"$CRIER_BIN" serve --exit-when-idle --rules "$WORK/rules" --set "keys_url=$RECEIVER_URL" 2>"$WORK/serve.log" ||
    fail "serve failed: $(cat "$WORK/serve.log")"
assert_eq "$planned" "$(sql "SELECT count(*) FROM crier.events WHERE state = 'done'")" \
    "events done (others: $(sql "SELECT string_agg(last_error, '; ') FROM crier.events WHERE state <> 'done'"))"

bad=$(sql "SELECT string_agg('row ' || v.n || ': ' || coalesce(n.key_hash::text || ' ' || n.key || ' '
                                                                || d.message_id, 'no notification'), E'\n'
                             ORDER BY v.n)
           FROM public.plannable v
           LEFT JOIN crier.notifications n ON n.tenant = v.tenant AND n.event_type = v.event_type
                AND n.entity_id = v.entity_id AND n.recipient_id = v.recipient_id
                AND n.discriminator IS NOT DISTINCT FROM v.discriminator
           LEFT JOIN crier.deliveries d ON d.notification_id = n.id
           WHERE n.key_hash::text IS DISTINCT FROM v.key_hash OR n.key IS DISTINCT FROM v.key
                 OR d.message_id IS DISTINCT FROM v.message_id")
[ -z "$bad" ] || fail "the engine stored keys that differ from the vectors:
$bad"
assert_eq "$planned" "$(sql "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'")" "all delivered"

# The side effects carry the same ids.
receiver_ids | sort >"$WORK/ids"
sql "SELECT message_id FROM public.plannable" | sort >"$WORK/expected_ids"
diff "$WORK/expected_ids" "$WORK/ids" >"$WORK/ids.diff" ||
    fail "webhook-ids at the receiver differ from the vectors' message ids: $(cat "$WORK/ids.diff")"

# The lock key is what the fan-out locks: while another session holds the lock
# of one event's natural key, that event stays pending (untouched, no
# notification) and the other events of the batch go through; once the lock
# is released, the event is fanned out.
sql "SELECT crier.emit('acme', 'ping', 'held'), crier.emit('acme', 'ping', 'free')" >/dev/null
psql -XAtq "$CRIER_DATABASE_URL" -c "BEGIN" \
    -c "SELECT pg_advisory_xact_lock(crier.event_lock_key('acme', 'ping', 'held'))" \
    -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
holder=$!
PIDS+=("$holder")
wait_for "SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
          AND (classid::bigint << 32 | objid::bigint) = crier.event_lock_key('acme', 'ping', 'held')" 10 \
    "the holder's advisory lock was not taken"
ping_serve locked "$RECEIVER_URL"
wait_for "SELECT state = 'done' FROM crier.events WHERE entity_id = 'free'" 30 "the free event was not fanned out"
sleep 1
assert_eq "pending|0|0" "$(sql "SELECT e.state || '|' || e.attempts || '|' || count(n.id) FROM crier.events e
                                LEFT JOIN crier.notifications n ON n.event_id = e.id
                                WHERE e.entity_id = 'held' GROUP BY e.id")" \
    "the event whose lock another session holds (state, attempts, notifications)"
sql "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'
     AND (classid::bigint << 32 | objid::bigint) = crier.event_lock_key('acme', 'ping', 'held')" >/dev/null
wait "$holder" 2>/dev/null || true
wait_for "SELECT state = 'done' FROM crier.events WHERE entity_id = 'held'" 30 \
    "the held event was not fanned out once the lock was released"
stop_serve
echo "ok"
