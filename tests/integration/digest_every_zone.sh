#!/usr/bin/env bash
# Fixed digest windows (digest = { every = ... }) are aligned in the recipient's local time
# (issue 15: every time decision uses the reader's zone): crier.digest_join with every =
# 1 day opens the window from today's local midnight to tomorrow's, for Europe/Berlin and
# America/Los_Angeles, as the C library's tz code computes them (date(1)); without a
# zone, from UTC midnight. An unknown zone counts as UTC.
. "$(dirname "$0")/../support/lib.sh"
new_db

midnight() { # zone, "today" | "tomorrow" -> that local midnight as a UTC instant
    date -u -d "@$(TZ="$1" date -d "$2 00:00" +%s)" '+%Y-%m-%d %H:%M:%S+00'
}

window() { # recipient, zone or NULL
    sql "SET TimeZone = 'UTC';
         SELECT crier.digest_join('acme', '$1', 'email', 'k', 'comment.created', NULL, 86400, NULL, $2);
         SELECT window_start || ' ' || window_end FROM crier.digests WHERE recipient_id = '$1'" | tail -n 1
}

# (a day boundary passing between the two reads would make them disagree: read again)
for zone in Europe/Berlin America/Los_Angeles; do
    for attempt in 1 2; do
        expected="$(midnight "$zone" today) $(midnight "$zone" tomorrow)"
        got=$(window "r_${zone}_$attempt" "'$zone'")
        [ "$got" = "$expected" ] && break
    done
    assert_eq "$expected" "$got" "every = 1d in $zone: local midnight to local midnight"
done
for attempt in 1 2; do
    expected="$(midnight UTC today) $(midnight UTC tomorrow)"
    got=$(window "r_utc_$attempt" NULL)
    [ "$got" = "$expected" ] && break
done
assert_eq "$expected" "$got" "every = 1d without a zone: UTC midnight to UTC midnight"
got=$(window "r_mars" "'Mars/Olympus'")
[ "$got" = "$expected" ] || [ "$(midnight UTC today)" != "${expected%% *}" ] ||
    fail "an unknown zone counts as UTC: got $got, expected $expected"
echo "ok"
