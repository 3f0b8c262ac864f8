#!/usr/bin/env bash
# `crier demo` on its own private cluster: exits 0, prints one alert per person
# per invoice, and leaves no PostgreSQL running.
. "$(dirname "$0")/../support/lib.sh"
out=$("$CRIER_BIN" demo --data-dir "$WORK/pg" 2>"$WORK/demo.log") || fail "demo failed: $(tail "$WORK/demo.log")"
grep -q "result: one alert per person per invoice" <<<"$out" || fail "demo result missing: $out"
grep -q "acme/alice      inv_1001: 1  inv_1002: 1  inv_1003: 1" <<<"$out" || fail "alice's line: $out"
grep -q "globex/erin     inv_2001: 1" <<<"$out" || fail "erin's line: $out"
[ ! -e "$WORK/pg/postmaster.pid" ] || fail "the demo left PostgreSQL running"
# A second run starts from a fresh database and gives the same result.
"$CRIER_BIN" demo --data-dir "$WORK/pg" 2>>"$WORK/demo.log" | grep -q "result: one alert per person per invoice" ||
    fail "second demo run failed"
[ ! -e "$WORK/pg/postmaster.pid" ] || fail "the second demo left PostgreSQL running"
echo "ok"
