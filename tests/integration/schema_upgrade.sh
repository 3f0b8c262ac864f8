#!/usr/bin/env bash
# A database made by the previous release upgrades in place: the fixture
# tests/fixtures/previous-release.dump (migrated by the binary of commit c37187a,
# with a few rows) is restored, `crier migrate` re-records the checksums of the
# rewritten migrations and applies the function files, and the result has the
# same schema as a fresh database, its rows, and working functions. A second
# migrate is a no-op; a changed function file is reapplied; a migration recorded
# with an unknown checksum is still refused.
. "$(dirname "$0")/../support/lib.sh"
new_db
fresh_url=$CRIER_DATABASE_URL
base=$("$CRIER_BIN" cluster url "$CRIER_TEST_PG")
db=t_schema_upgrade_previous
export PGOPTIONS="-c client_min_messages=warning"
psql -XAtq "$base" -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
export CRIER_DATABASE_URL="$base dbname=$db"

note "restore the previous release's database"
pg_restore --no-owner --no-privileges --exit-on-error -d "$CRIER_DATABASE_URL" \
    "$CRIER_SOURCE_DIR/tests/fixtures/previous-release.dump" || fail "pg_restore of the fixture failed"
assert_eq 10 "$(sql "SELECT count(*) FROM crier.schema_migrations")" "the fixture has the 10 previous migrations"
previous=$(sql "SELECT string_agg(name, ' ' ORDER BY name) FROM crier.schema_migrations")

note "crier migrate upgrades it"
"$CRIER_BIN" migrate >"$WORK/migrate1.out" 2>&1 || fail "migrate of the previous release failed: $(cat "$WORK/migrate1.out")"
cat "$WORK/migrate1.out" >&2
rerecorded=$(grep -c '^re-recorded ' "$WORK/migrate1.out" || true)
assert_eq "$(grep -c '^[0-9]' "$CRIER_SOURCE_DIR/sql/rewritten-checksums.txt")" "$rerecorded" \
    "one re-recorded line per rewritten migration"
grep -q '^re-recorded 007_feed_mark_all.sql: rewritten' "$WORK/migrate1.out" || fail "007 not re-recorded"
for m in $previous; do
    ! grep -q "^applied $m" "$WORK/migrate1.out" || fail "no numbered migration should run again ($m did)"
done
functions=$(find "$CRIER_SOURCE_DIR/sql/functions" -name '*.sql' | wc -l)
assert_eq "$functions" "$(grep -c '^applied function ' "$WORK/migrate1.out" || true)" "every function file applied"
assert_eq 0 "$(sql "SELECT count(*) FROM crier.schema_migrations WHERE checksum = ANY (string_to_array(
    '$(awk '/^[0-9]/ { print $2 }' "$CRIER_SOURCE_DIR/sql/rewritten-checksums.txt" | paste -sd,)', ','))")" \
    "no former checksum is still recorded"

note "its schema is the fresh one"
"$CRIER_SOURCE_DIR/scripts/schema-dump" --database "$CRIER_DATABASE_URL" --full >"$WORK/upgraded.sql"
"$CRIER_SOURCE_DIR/scripts/schema-dump" --database "$fresh_url" --full >"$WORK/fresh.sql"
if ! diff -u "$WORK/fresh.sql" "$WORK/upgraded.sql" >"$WORK/schema.diff"; then
    cat "$WORK/schema.diff" >&2
    fail "the upgraded database's schema differs from a fresh one (diff above: - fresh, + upgraded)"
fi

note "its rows are still there, and the functions work on them"
assert_eq "acme|1|1|2|2|1" "$(sql "SELECT t.tenant, (SELECT count(*) FROM crier.api_keys),
    (SELECT count(*) FROM crier.events), (SELECT count(*) FROM crier.notifications),
    (SELECT count(*) FROM crier.deliveries), (SELECT count(*) FROM crier.delivery_attempts)
    FROM crier.api_tenants t")" "tenant, key, event, notifications, deliveries, attempt"
assert_eq 32 "$(sql "SELECT octet_length(crier.api_tenant_secret('acme'))")" "the tenant keeps its secret"
assert_eq "3|audience|t
1|direct|t" "$(sql "SELECT id, kind, read FROM crier.feed('acme', 'user_1', NULL, 10)")" \
    "user_1's feed, read by the mark-all-read made before the upgrade"
assert_eq "0|0" "$(sql "SELECT unread, unseen FROM crier.feed_counts('acme', 'user_1')")" "user_1's counts"
assert_eq "1|1" "$(sql "SELECT unread, unseen FROM crier.feed_counts('acme', 'user_2')")" "user_2's counts"
assert_eq delivered "$(sql "SELECT crier.api_notification('acme', 1)->>'status'")" "notification 1's status"
assert_eq "delivery|email" "$(sql "SELECT kind, channel FROM crier.api_dead_letters('acme', NULL, NULL, NULL,
    NULL, NULL, NULL, NULL)")" "the dead email is a dead letter"
assert_eq f "$(sql "SELECT enabled FROM crier.preferences WHERE recipient_id = 'user_2'")" "the preference"
id=$(sql "SELECT crier.emit('acme', 'invoice.created', 'inv_2', '{}')")
[ "$id" -gt 1 ] || fail "emit after the upgrade returned '$id'"
assert_eq "$id" "$(sql "SELECT crier.emit('acme', 'invoice.created', 'inv_2', '{}')")" "emit still dedupes"
assert_eq 32 "$(sql "INSERT INTO crier.api_tenants (tenant) VALUES ('globex') RETURNING octet_length(secret)")" \
    "a new tenant gets a random secret by default"

note "a second migrate is a no-op"
out=$("$CRIER_BIN" migrate)
case "$out" in "schema crier is up to date"*) ;; *) fail "second migrate should do nothing, said: $out" ;; esac
"$CRIER_SOURCE_DIR/scripts/schema-dump" --database "$CRIER_DATABASE_URL" --full | diff -q - "$WORK/upgraded.sql" >/dev/null ||
    fail "the second migrate changed the schema"

note "a function file whose checksum changed is reapplied, and only it"
sql "UPDATE crier.schema_functions SET checksum = 'edited' WHERE name = 'feed_mark_all.sql'"
out=$("$CRIER_BIN" migrate)
assert_eq "reapplied (changed) function feed_mark_all.sql" "$out" "migrate after a function file changed"

note "any other checksum mismatch is still refused"
sql "UPDATE crier.schema_migrations SET checksum = repeat('0', 64) WHERE name = '005_feeds.sql'"
if out=$("$CRIER_BIN" migrate 2>&1); then
    fail "a migration recorded with an unknown checksum should be refused, said: $out"
fi
case "$out" in
    *"migration 005_feeds.sql was applied with different content"*"must never be edited once applied"*) ;;
    *) fail "unclear refusal: $out" ;;
esac
echo "ok"
