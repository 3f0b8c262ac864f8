#!/usr/bin/env bash
# The CLI's first minutes, as a newcomer meets them: a directory without rules
# is named as such, a mistyped flag gets a suggestion and one line pointing at
# --help (not the whole help), a command on an unmigrated database says to run
# crier migrate, nothing is migrated before the arguments are valid, and
# commands other than the daemon keep quiet unless something is wrong.
. "$(dirname "$0")/../support/lib.sh"

note "check on a directory without rules"
mkdir -p "$WORK/no-rules"
echo "describe('x', function() end)" >"$WORK/no-rules/billing_spec.lua"
if out=$("$CRIER_BIN" check "$WORK/no-rules" 2>&1); then
    fail "check of a directory without rules passed: $out"
fi
grep -qF "$WORK/no-rules: no rules here" <<<"$out" || fail "check says there are no rules: $out"
grep -q "runtime error" <<<"$out" && fail "check crashed: $out"

note "a mistyped flag: the error, a suggestion, one line pointing at --help"
# refused CMD-ARGS… : runs crier with them, which must exit 2; the output is in $out
refused() {
    if out=$("$CRIER_BIN" "$@" 2>&1); then fail "crier $* was accepted: $out"; fi
}
refused serve --bach-size 3
assert_eq "crier serve: unknown option '--bach-size'
did you mean --batch-size?
crier serve --help lists the options" "$out" "a mistyped serve flag"
refused dead list --sinse 2h
grep -qx "did you mean --since?" <<<"$out" || fail "dead list's suggestion: $out"
refused serve --batch 3
grep -qx "did you mean --batch-size or --batch-budget?" <<<"$out" || fail "an ambiguous abbreviation: $out"
refused serve --exit-when-idle=yes
grep -q "is a switch and takes no value" <<<"$out" || fail "a value for a switch: $out"
refused emit --tenant
grep -q "crier emit: --tenant needs a value" <<<"$out" || fail "a missing value: $out"
refused demo --data-dri "$WORK/pg"
grep -qx "did you mean --data-dir?" <<<"$out" || fail "demo's suggestion: $out"
refused serv
grep -qx "did you mean crier serve?" <<<"$out" || fail "a mistyped command: $out"
refused check --frobnicate
[ "$(echo "$out" | wc -l)" -le 3 ] || fail "no whole help after a bad flag: $out"
grep -q "^crier check --help" <<<"$out" || fail "the line pointing at --help: $out"

note "an unmigrated database: run crier migrate"
base=$("$CRIER_BIN" cluster url "$CRIER_TEST_PG")
psql -XAtq "$base" -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS t_cli_friction_raw WITH (FORCE)" \
    -c "CREATE DATABASE t_cli_friction_raw" >/dev/null
RAW="$base dbname=t_cli_friction_raw"
raw_sql() { psql -XAtq "$RAW" -v ON_ERROR_STOP=1 -c "$1"; }
unmigrated() { # CMD-ARGS…: must fail on the unmigrated database and say to run crier migrate
    if out=$("$CRIER_BIN" "$@" --database "$RAW" 2>&1); then fail "crier $* ran on an unmigrated database: $out"; fi
    grep -q "run crier migrate" <<<"$out" || fail "crier $* says to run crier migrate: $out"
}
unmigrated status
unmigrated emit --no-validate --tenant acme --type ping --entity p1
unmigrated dead list
unmigrated feed list --tenant acme --user ann
unmigrated keys list
unmigrated token --tenant acme --user ann
unmigrated serve --no-migrate --rules "$CRIER_SOURCE_DIR/tests/support/rules" --set ping_url=http://127.0.0.1:9/
unmigrated try --rules "$CRIER_SOURCE_DIR/tests/support/rules" --set ping_url=http://127.0.0.1:9/ \
    --tenant acme --type ping --entity p1

note "nothing is migrated (or started) before the arguments are valid"
not_run() { # WHY CMD-ARGS…: serve must refuse before it migrates
    local why=$1
    shift
    if out=$("$CRIER_BIN" serve --database "$RAW" --exit-when-idle "$@" 2>&1); then fail "serve ran $why: $out"; fi
    assert_eq "" "$(raw_sql "SELECT to_regnamespace('crier')")" "nothing migrated $why ($out)"
}
not_run "with a missing rules directory" --rules "$WORK/missing"
grep -q "cannot open rules directory" <<<"$out" || fail "serve says why: $out"
not_run "with a setting the rules need missing" --rules "$CRIER_SOURCE_DIR/tests/support/rules"
grep -q "setting 'ping_url' is not set" <<<"$out" || fail "serve names the setting: $out"
not_run "with a malformed --http" --rules "$CRIER_SOURCE_DIR/tests/support/rules" --set ping_url=http://127.0.0.1:9/ \
    --http 127.0.0.1
grep -q "\-\-http expects HOST:PORT" <<<"$out" || fail "serve says what --http takes: $out"

"$CRIER_BIN" migrate --database "$RAW" >/dev/null
"$CRIER_BIN" status --database "$RAW" >/dev/null || fail "status on the migrated database"
raw_sql "DELETE FROM crier.schema_migrations WHERE name = (SELECT max(name) FROM crier.schema_migrations)"
unmigrated status
grep -q "behind this crier (1 migration pending, from " <<<"$out" || fail "status says what is behind: $out"

note "log levels: commands say only what went wrong, the daemon says what it does"
"$CRIER_BIN" check "$CRIER_SOURCE_DIR/examples/rules" >"$WORK/check.out" 2>"$WORK/check.err" ||
    fail "check of the examples: $(cat "$WORK/check.err")"
[ ! -s "$WORK/check.err" ] || fail "check logs at info by default: $(cat "$WORK/check.err")"
grep -q ": ok (rules version " "$WORK/check.out" || fail "check's result on stdout: $(cat "$WORK/check.out")"
CRIER_LOG=info "$CRIER_BIN" check "$CRIER_SOURCE_DIR/examples/rules" >/dev/null 2>"$WORK/check.err"
grep -q "INFO rules: loaded" "$WORK/check.err" || fail "CRIER_LOG=info overrides: $(cat "$WORK/check.err")"
new_db
"$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/tests/support/rules" --set ping_url=http://127.0.0.1:9/ \
    --exit-when-idle >"$WORK/serve.log" 2>&1 || fail "serve: $(tail -5 "$WORK/serve.log")"
grep -q "INFO engine: running" "$WORK/serve.log" || fail "serve logs at info: $(cat "$WORK/serve.log")"
CRIER_LOG=warn "$CRIER_BIN" serve --rules "$CRIER_SOURCE_DIR/tests/support/rules" --set ping_url=http://127.0.0.1:9/ \
    --exit-when-idle >"$WORK/serve.log" 2>&1 || fail "serve: $(tail -5 "$WORK/serve.log")"
grep -q "INFO" "$WORK/serve.log" && fail "CRIER_LOG=warn quiets serve: $(cat "$WORK/serve.log")"

echo "ok"
