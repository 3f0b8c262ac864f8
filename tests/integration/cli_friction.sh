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
echo "$out" | grep -qF "$WORK/no-rules: no rules here" || fail "check says there are no rules: $out"
echo "$out" | grep -q "runtime error" && fail "check crashed: $out"

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
echo "$out" | grep -qx "did you mean --since?" || fail "dead list's suggestion: $out"
refused serve --batch 3
echo "$out" | grep -qx "did you mean --batch-size or --batch-budget?" || fail "an ambiguous abbreviation: $out"
refused serve --exit-when-idle=yes
echo "$out" | grep -q "is a switch and takes no value" || fail "a value for a switch: $out"
refused emit --tenant
echo "$out" | grep -q "crier emit: --tenant needs a value" || fail "a missing value: $out"
refused demo --data-dri "$WORK/pg"
echo "$out" | grep -qx "did you mean --data-dir?" || fail "demo's suggestion: $out"
refused serv
echo "$out" | grep -qx "did you mean crier serve?" || fail "a mistyped command: $out"
refused check --frobnicate
[ "$(echo "$out" | wc -l)" -le 3 ] || fail "no whole help after a bad flag: $out"
echo "$out" | grep -q "^crier check --help" || fail "the line pointing at --help: $out"

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
