#!/usr/bin/env bash
# Stored recipient settings (time zone, locale, quiet hours): set field by
# field, validated against PostgreSQL's time zone database, and a refused call
# changes nothing.
. "$(dirname "$0")/../support/lib.sh"
new_db

got=$(sql "SELECT crier.set_recipient_settings('acme', 'alice', '{\"time_zone\": \"Europe/Berlin\", \"locale\": \"de-AT\"}')::jsonb - 'updated_at'")
assert_eq '{"locale": "de-AT", "time_zone": "Europe/Berlin", "quiet_hours": null}' "$got" "settings as stored"
sql "SELECT crier.set_recipient_settings('acme', 'alice', '{\"quiet_hours\": [{\"from\": \"22:00\", \"to\": \"07:00\", \"days\": [\"mon\", \"fri\"]}]}')" >/dev/null
assert_eq "Europe/Berlin|de-AT|22:00" \
    "$(sql "SELECT time_zone || '|' || locale || '|' || (quiet_hours -> 0 ->> 'from') FROM crier.recipient_settings WHERE recipient_id = 'alice'")" \
    "an absent key leaves a field as it was"
sql "SELECT crier.set_recipient_settings('acme', 'alice', '{\"locale\": null}')" >/dev/null
assert_eq "null" "$(sql "SELECT coalesce(locale, 'null') FROM crier.recipient_settings WHERE recipient_id = 'alice'")" \
    "JSON null clears a field"

refused() { # settings, what the error must say
    if sql "SELECT crier.set_recipient_settings('acme', 'alice', '$1')" 2>"$WORK/err" >/dev/null; then
        fail "refused: $1"
    fi
    grep -q -- "$2" "$WORK/err" || fail "the error for $1 says '$2': $(cat "$WORK/err")"
}
before=$(sql "SELECT row_to_json(s)::text FROM crier.recipient_settings s")
refused '{"time_zone": "Mars/Olympus"}' "not a time zone of the IANA database"
refused '{"time_zone": "CEST"}' "not a time zone of the IANA database"
refused '{"locale": "German"}' "not a locale tag"
refused '{"quiet_hours": {"from": "22:00"}}' "must be a JSON array"
refused '[1]' "must be a JSON object"
refused '{"timezone": "UTC"}' "unknown setting"
refused '{"quiet_hours": [{"from": "22:00", "to": "25:00"}]}' '"to" must be a local time'
refused '{"quiet_hours": [{"from": "22:00", "to": "22:00"}]}' "is empty"
refused '{"quiet_hours": [{"from": "22:00", "to": "07:00", "days": ["monday"]}]}' 'is not one of'
refused '{"time_zone": "UTC", "quiet_hours": [{"from": "1:00", "to": "07:00"}]}' '"from" must be a local time'
assert_eq "$before" "$(sql "SELECT row_to_json(s)::text FROM crier.recipient_settings s")" "refused calls changed nothing"

# crier try plans with the stored settings, as crier serve does: ann's stored
# zone renders her date, bob has none (UTC)
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "meeting" { payload = { at = "string" } }
crier.rule "meeting" {
    recipients = { "ann", "bob" },
    channels = { "feed" },
    feed = { title = "starts {{ payload.at | date('%H:%M %Z') }}" },
}
LUA
sql "SELECT crier.set_recipient_settings('acme', 'ann', '{\"time_zone\": \"America/Los_Angeles\"}')" >/dev/null
printf '{"tenant": "acme", "type": "meeting", "entity_id": "m1", "payload": {"at": "2026-12-03T09:00:00Z"}}' >"$WORK/event.json"
out=$("$CRIER_BIN" try --rules "$WORK/rules" "$WORK/event.json" 2>&1) || fail "crier try: $out"
grep -q "starts 01:00 PST" <<<"$out" || fail "ann's stored zone in crier try: $out"
grep -q "starts 09:00 UTC" <<<"$out" || fail "bob without a zone: $out"
echo "ok"
