#!/usr/bin/env bash
# Rule queries run as the unprivileged role crier_rules, never as crier's own
# role: COPY … TO PROGRAM, pg_read_file and a SELECT of crier's secrets fail
# with a clear error and leave no trace (the events are quarantined with it),
# while a query of granted application data works. crier serve and crier try
# refuse a privileged role for rule queries unless told otherwise, loudly.
. "$(dirname "$0")/../support/lib.sh"
new_db
sql "CREATE SCHEMA app;
     CREATE TABLE app.members (org text, user_id text);
     INSERT INTO app.members VALUES ('acme', 'al'), ('acme', 'bo');
     CREATE TABLE app.payroll (user_id text, salary int);
     INSERT INTO app.payroll VALUES ('al', 1);
     GRANT USAGE ON SCHEMA app TO crier_rules; GRANT SELECT ON app.members TO crier_rules" >/dev/null
"$CRIER_BIN" keys create --tenant acme --name probe >/dev/null 2>&1 || fail "keys create"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.api_tenants WHERE tenant = 'acme'")" "the tenant has a secret"

mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<LUA
local crier = require "crier"
local probes = {
    ok = "SELECT user_id AS id FROM app.members WHERE org = \$1 ORDER BY user_id",
    program = "COPY (SELECT 1) TO PROGRAM 'touch $WORK/pwned'",
    file = "SELECT pg_read_file('/etc/hostname') AS id WHERE \$1::text IS NOT NULL",
    secret = "SELECT secret::text AS id FROM crier.api_tenants WHERE tenant = \$1",
    ungranted = "SELECT user_id AS id FROM app.payroll WHERE \$1::text IS NOT NULL",
}
for name, text in pairs(probes) do
    local q = crier.query("probe_" .. name, text)
    crier.event_type("probe." .. name) { payload = {} }
    crier.rule("probe." .. name) {
        recipients = function(event)
            if name == "program" then return q() end -- COPY takes no parameters
            return q(event.tenant)
        end,
        channels = { "feed" },
        feed = { title = "probe" },
    }
end
LUA
"$CRIER_BIN" check "$WORK/rules" >/dev/null || fail "the probe rules load"
for p in ok program file secret ungranted; do
    sql "SELECT crier.emit('acme', 'probe.$p', 'e1', '{}')" >/dev/null
done
"$CRIER_BIN" serve --rules "$WORK/rules" --event-attempts 1 --exit-when-idle >"$WORK/serve.log" 2>&1 ||
    fail "serve: $(tail -5 "$WORK/serve.log")"

assert_eq "done:2" "$(sql "SELECT e.state || ':' || count(n.id) FROM crier.events e LEFT JOIN crier.notifications n ON n.event_id = e.id
                          WHERE e.event_type = 'probe.ok' GROUP BY e.state")" "granted data is read"
for p in program file secret ungranted; do
    assert_eq "dead:0" "$(sql "SELECT e.state || ':' || count(n.id) FROM crier.events e LEFT JOIN crier.notifications n ON n.event_id = e.id
                              WHERE e.event_type = 'probe.$p' GROUP BY e.state")" "probe.$p is quarantined with nothing made"
done
err() { sql "SELECT last_error FROM crier.events WHERE event_type = 'probe.$1'"; }
err program | grep -q "must be superuser or have privileges of the pg_execute_server_program role" ||
    fail "COPY TO PROGRAM is refused with a clear error: $(err program)"
err file | grep -q "permission denied for function pg_read_file" || fail "pg_read_file is refused: $(err file)"
err secret | grep -q "permission denied for schema crier" || fail "crier's secrets are out of reach: $(err secret)"
err ungranted | grep -q "permission denied for table payroll" || fail "ungranted tables are out of reach: $(err ungranted)"
[ ! -e "$WORK/pwned" ] || fail "COPY TO PROGRAM ran a program"

# crier's own role, or any privileged one, is refused for rule queries...
SUPER="$CRIER_DATABASE_URL"
if "$CRIER_BIN" serve --rules "$WORK/rules" --rules-database "$SUPER" --exit-when-idle >"$WORK/refused.log" 2>&1; then
    fail "serve started with a superuser for rule queries"
fi
grep -q "rule queries would run as role crier, which is a superuser" "$WORK/refused.log" ||
    fail "serve says why it refuses: $(cat "$WORK/refused.log")"
grep -q "allow-privileged-rule-queries" "$WORK/refused.log" || fail "serve says the way out"
sql "CREATE ROLE crier_probe_reader LOGIN; GRANT pg_read_server_files TO crier_probe_reader" >/dev/null 2>&1 || true
if CRIER_RULES_DATABASE_URL="$SUPER user=crier_probe_reader" "$CRIER_BIN" serve --rules "$WORK/rules" --exit-when-idle \
    >"$WORK/refused2.log" 2>&1; then
    fail "serve started with a role that reads the server's files"
fi
grep -q "reads the server's files (pg_read_server_files)" "$WORK/refused2.log" ||
    fail "serve names the power: $(cat "$WORK/refused2.log")"
if out=$("$CRIER_BIN" try --rules "$WORK/rules" --rules-database "$SUPER" --tenant acme --type probe.program \
    --entity e2 --payload '{}' 2>&1); then
    fail "try ran a rule query as a superuser: $out"
fi
grep -q "is a superuser" <<<"$out" || fail "try says why: $out"
[ ! -e "$WORK/pwned" ] || fail "try's COPY TO PROGRAM ran a program"

# ...unless the operator says so explicitly, and then loudly.
"$CRIER_BIN" serve --rules "$WORK/rules" --rules-database "$SUPER" --allow-privileged-rule-queries --exit-when-idle \
    >"$WORK/allowed.log" 2>&1 || fail "serve with --allow-privileged-rule-queries: $(tail -3 "$WORK/allowed.log")"
grep -q "DANGER: rule queries would run as role crier" "$WORK/allowed.log" || fail "the danger is logged"
echo "ok"
