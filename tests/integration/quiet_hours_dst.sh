#!/usr/bin/env bash
# Quiet hours across DST changes (issue 15): crier.quiet_hours_end, the one place that
# decides when a person's quiet hours end, for Europe/Berlin and America/Los_Angeles on
# both of their 2026 change dates. Every expected instant is computed here by the C
# library's tz code (TZ=<zone> date -d '<local time>'), not by PostgreSQL; each case is
# chosen so that ignoring the zone (reading the periods as UTC) gives another answer.
. "$(dirname "$0")/../support/lib.sh"
new_db

# local "YYYY-MM-DD HH:MM" in a zone -> the instant in UTC, as PostgreSQL prints it with TimeZone UTC
instant() { date -u -d "@$(TZ="$1" date -d "$2" +%s)" '+%Y-%m-%d %H:%M:%S+00'; }

check() { # zone, at (UTC), quiet JSON, expected ("" = not in quiet hours), what
    local got
    got=$(sql "SET TimeZone = 'UTC'; SELECT coalesce(crier.quiet_hours_end('$2'::timestamptz, '$1', '$3')::text, '')")
    assert_eq "$4" "$got" "$5 ($1, at $2)"
}

night='[{"from": "22:00", "to": "07:00"}]'
# Berlin springs forward on 2026-03-29 (02:00 CET -> 03:00 CEST)
check Europe/Berlin "2026-03-29 00:30:00+00" "$night" "$(instant Europe/Berlin '2026-03-29 07:00')" \
    "a night that loses an hour ends at 07:00 CEST"
check Europe/Berlin "2026-03-28 21:00:00+00" "$night" "$(instant Europe/Berlin '2026-03-29 07:00')" \
    "22:00 CET the evening before is inside"
check Europe/Berlin "2026-03-29 05:00:00+00" "$night" "" "07:00 CEST itself is after the quiet hours"
check Europe/Berlin "2026-03-29 00:59:59+00" '[{"from": "01:00", "to": "03:00"}]' \
    "$(instant Europe/Berlin '2026-03-29 03:00')" "a period ending right after the gap (01:59:59 CET)"
# Berlin falls back on 2026-10-25 (03:00 CEST -> 02:00 CET)
check Europe/Berlin "2026-10-24 21:00:00+00" "$night" "$(instant Europe/Berlin '2026-10-25 07:00')" \
    "a night that gains an hour ends at 07:00 CET"
check Europe/Berlin "2026-10-25 05:30:00+00" "$night" "$(instant Europe/Berlin '2026-10-25 07:00')" \
    "06:30 CET is still inside"
# Los Angeles springs forward on 2026-03-08 (02:00 PST -> 03:00 PDT)
check America/Los_Angeles "2026-03-08 08:00:00+00" "$night" "$(instant America/Los_Angeles '2026-03-08 07:00')" \
    "midnight PST: the night ends at 07:00 PDT"
check America/Los_Angeles "2026-03-08 06:30:00+00" "$night" "$(instant America/Los_Angeles '2026-03-08 07:00')" \
    "22:30 PST the evening before"
check America/Los_Angeles "2026-03-08 14:00:00+00" "$night" "" "07:00 PDT is after the quiet hours"
# Los Angeles falls back on 2026-11-01 (02:00 PDT -> 01:00 PST)
check America/Los_Angeles "2026-11-01 07:00:00+00" "$night" "$(instant America/Los_Angeles '2026-11-01 07:00')" \
    "midnight PDT: the night ends at 07:00 PST"
check America/Los_Angeles "2026-11-01 14:30:00+00" "$night" "$(instant America/Los_Angeles '2026-11-01 07:00')" \
    "06:30 PST is still inside"

# weekdays are the days a period starts on: Saturday night runs into Sunday morning,
# Sunday night is not quiet
sat='[{"from": "22:00", "to": "07:00", "days": ["sat"]}]'
check Europe/Berlin "2026-03-29 03:00:00+00" "$sat" "$(instant Europe/Berlin '2026-03-29 07:00')" \
    "Saturday's night, Sunday morning"
check Europe/Berlin "2026-03-29 20:30:00+00" "$sat" "" "Sunday night is not Saturday's"
# periods that follow each other are one quiet time
check America/Los_Angeles "2026-11-01 06:30:00+00" '[{"from": "00:00", "to": "07:00"}, {"from": "22:00", "to": "00:00"}]' \
    "$(instant America/Los_Angeles '2026-11-01 07:00')" "22:00-00:00 then 00:00-07:00"
# a weekend chained from nightly and weekend-day periods, across Berlin's autumn change
weekend='[{"from": "20:00", "to": "08:00"}, {"from": "08:00", "to": "20:00", "days": ["sat", "sun"]}]'
check Europe/Berlin "2026-10-24 08:00:00+00" "$weekend" "$(instant Europe/Berlin '2026-10-26 08:00')" \
    "Saturday 10:00 CEST: quiet until Monday 08:00 CET"
check Europe/Berlin "2026-10-23 18:30:00+00" "$weekend" "$(instant Europe/Berlin '2026-10-26 08:00')" \
    "Friday 20:30 CEST: the whole weekend"
check Europe/Berlin "2026-03-29 00:30:00+00" '[]' "" "no quiet hours"
check Mars/Olympus "2026-03-29 06:30:00+00" "$night" "2026-03-29 07:00:00+00" "an unknown zone counts as UTC"
echo "ok"
