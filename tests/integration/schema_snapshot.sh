#!/usr/bin/env bash
# sql/schema.sql is what the migrations produce: a fresh database migrated by
# this binary dumps (scripts/schema-dump --database) exactly the checked-in file;
# on a difference the test prints it and the command that regenerates the file.
. "$(dirname "$0")/../support/lib.sh"
new_db

note "the checked-in sql/schema.sql against a freshly migrated database"
"$CRIER_SOURCE_DIR/scripts/schema-dump" --database "$CRIER_DATABASE_URL" >"$WORK/schema.sql" ||
    fail "scripts/schema-dump --database failed"
if ! diff -u "$CRIER_SOURCE_DIR/sql/schema.sql" "$WORK/schema.sql" >"$WORK/schema.diff"; then
    cat "$WORK/schema.diff" >&2
    fail "sql/schema.sql differs from what the migrations produce (diff above: - checked in, + produced);" \
        "regenerate it with: scripts/build && scripts/schema-dump"
fi
echo "ok"
