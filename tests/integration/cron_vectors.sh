#!/usr/bin/env bash
# The cron expressions of tests/vectors/cron.tsv against PostgreSQL's
# crier.cron_parse and crier.cron_next (tests/lua/cron_spec.lua checks the
# same rows against lua/crier/cron.lua): the sets each expression means, its
# refusal with the row's message, and the next occurrence in the row's time
# zone — across clock changes in Europe/Berlin, America/New_York and
# Australia/Lord_Howe (a skipped local time fires at the jump, a repeated one
# once, at its first instant). An unknown zone is refused.
. "$(dirname "$0")/../support/lib.sh"
new_db
rows=0
while IFS=$'\t' read -r expr sets zone after next; do
    case "$expr" in "#"* | expr) continue ;; esac
    rows=$((rows + 1))
    lit=$(printf "%s" "$expr" | sed "s/'/''/g")
    if [ "${sets#error: }" != "$sets" ]; then
        if out=$(sql "SELECT crier.cron_parse('$lit')" 2>&1); then
            fail "'$expr' was accepted: $out"
        fi
        grep -qF "${sets#error: }" <<<"$out" || fail "'$expr': expected an error with '${sets#error: }', got: $out"
        continue
    fi
    got=$(sql "WITH c AS (SELECT * FROM crier.cron_parse('$lit'))
               SELECT concat_ws(' ',
                   CASE WHEN cardinality(seconds) = 60 THEN '*' ELSE array_to_string(seconds, ',') END,
                   CASE WHEN cardinality(minutes) = 60 THEN '*' ELSE array_to_string(minutes, ',') END,
                   CASE WHEN cardinality(hours) = 24 THEN '*' ELSE array_to_string(hours, ',') END,
                   CASE WHEN cardinality(doms) = 31 THEN '*' ELSE array_to_string(doms, ',') END,
                   CASE WHEN cardinality(months) = 12 THEN '*' ELSE array_to_string(months, ',') END,
                   CASE WHEN cardinality(dows) = 7 THEN '*' ELSE array_to_string(dows, ',') END) FROM c")
    assert_eq "$sets" "$got" "the sets of '$expr'"
    got=$(sql "SELECT coalesce(to_char(crier.cron_next('$lit', '$zone', '$after') AT TIME ZONE 'UTC',
                                       'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '-')")
    assert_eq "$next" "$got" "the next occurrence of '$expr' in $zone after $after"
done <"$CRIER_SOURCE_DIR/tests/vectors/cron.tsv"
[ "$rows" -ge 40 ] || fail "only $rows rows in tests/vectors/cron.tsv"
if out=$(sql "SELECT crier.cron_next('0 8 * * *', 'Mars/Olympus_Mons', now())" 2>&1); then
    fail "an unknown zone was accepted"
fi
grep -q 'time zone "Mars/Olympus_Mons" not recognized' <<<"$out" || fail "unknown zone: $out"
echo "ok ($rows rows)"
