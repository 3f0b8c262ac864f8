#!/usr/bin/env bash
# The optional Lua config file (--config FILE, or CRIER_CONFIG): its keys are
# a command's long options, flags on the command line win, secrets can come
# from the environment; a bad file is refused with a message naming the file
# (and line) and what to do, before anything runs.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "ping" { payload = {} }
crier.rule "ping" {
    recipients = { "ops" },
    channels = { "webhook" },
    webhook = { url = crier.setting("url"), secret = crier.setting("secret") },
}
LUA
export HOOK_SECRET_FROM_ENV="whsec_$(printf 'k%.0s' $(seq 32) | base64 -w0)"
cat >"$WORK/crier.conf.lua" <<LUA
-- a config file is Lua: comments, locals, the environment for secrets
local dir = "$WORK"
return {
    database = os.getenv("DB_FOR_CONFIG"),
    rules = dir .. "/rules",
    set = { url = "$RECEIVER_URL", secret = os.getenv("HOOK_SECRET_FROM_ENV") },
    serve = {
        poll = 0.2,
        batch_size = 50,
        http = "127.0.0.1:1",          -- overridden on the command line below
        exit_when_idle = true,
    },
    dead = { limit = 5, json = true },
    bench_feed = { no_such_option_for_serve = 1 }, -- another command's table: skipped by serve
}
LUA
sql "SELECT crier.emit('acme', 'ping', 'p1')" >/dev/null
DB_FOR_CONFIG=$CRIER_DATABASE_URL env -u CRIER_DATABASE_URL "$CRIER_BIN" serve --config "$WORK/crier.conf.lua" --http 127.0.0.1:0 \
    >"$WORK/serve.log" 2>&1 || fail "serve with a config file: $(tail -5 "$WORK/serve.log")"
grep -q "listening on http://127.0.0.1:" "$WORK/serve.log" || fail "the flag's --http won over the file's"
grep -q "listening on http://127.0.0.1:1 " "$WORK/serve.log" && fail "the file's http was used"
assert_eq delivered "$(sql "SELECT state FROM crier.deliveries")" "delivered with the file's settings"
[ "$(requests_at "$RECEIVER_LOG")" = 1 ] || fail "one request at the receiver"
grep -q "webhook-signature" "$RECEIVER_LOG" || fail "signed with the secret from the environment"

# CRIER_CONFIG works like --config; one file serves every command (here crier
# dead: the top level and its own table).
DB_FOR_CONFIG=$CRIER_DATABASE_URL CRIER_CONFIG="$WORK/crier.conf.lua" "$CRIER_BIN" dead list \
    --database "host=/nonexistent" >/dev/null 2>"$WORK/dead.err" &&
    fail "the --database flag should win over the file's (and fail)"
DB_FOR_CONFIG=$CRIER_DATABASE_URL CRIER_CONFIG="$WORK/crier.conf.lua" "$CRIER_BIN" dead list \
    >"$WORK/dead.out" 2>"$WORK/dead.err" || fail "crier dead list with CRIER_CONFIG: $(cat "$WORK/dead.err")"

# Bad files: each refused with what was wrong, nothing run.
bad() { # LUA-TEXT EXPECTED-MESSAGE-PART WHAT
    printf '%s\n' "$1" >"$WORK/bad.conf.lua"
    if "$CRIER_BIN" serve --config "$WORK/bad.conf.lua" --exit-when-idle >"$WORK/bad.out" 2>&1; then
        fail "$3: serve ran"
    fi
    grep -qF -- "$2" "$WORK/bad.out" || fail "$3: expected '$2' in: $(cat "$WORK/bad.out")"
}
bad 'return { batch_size = 50,, }' "bad.conf.lua:1:" "a syntax error names file and line"
bad 'return { no_such_option = 1 }' "unknown setting 'no_such_option' for crier serve" "an unknown key"
bad 'return { serve = { batch_sise = 50 } }' "serve: unknown setting 'batch_sise'" "a typo in the command's table"
bad 'return { serve = 5 }' "serve must be a table" "the command's table is not a table"
bad 'return { serve = { batch_size = "lots" } }' "came from the config file" "a bad value says where it came from"
bad 'return { serve = { exit_when_idle = "yes" } }' "is a switch: set it to true or false" "a switch with a string"
bad 'return { serve = { http = true } }' "takes a value" "an option with a boolean"
bad 'return 42' "must return a table" "not a table"
bad 'error("no config for you")' "no config for you" "an error raised by the file"
bad 'return { x = io.open("/etc/passwd") }' "io" "no io in a config file"
# a serve option at the top level is refused by a command without it, with the way out
printf 'return { rules = "%s", batch_size = 50 }\n' "$WORK/rules" >"$WORK/top.conf.lua"
if "$CRIER_BIN" check --config "$WORK/top.conf.lua" >"$WORK/bad.out" 2>&1; then fail "check took batch_size"; fi
grep -q "put a command's own options in a table named after it, e.g. check = { batch_size" "$WORK/bad.out" ||
    fail "the way out is named: $(cat "$WORK/bad.out")"
if "$CRIER_BIN" serve --config "$WORK/missing.conf.lua" >"$WORK/bad.out" 2>&1; then fail "a missing file"; fi
grep -q "cannot read the config file" "$WORK/bad.out" || fail "a missing file: $(cat "$WORK/bad.out")"
assert_eq 1 "$(sql "SELECT count(*) FROM crier.events")" "nothing was emitted or changed by the bad files"
echo "ok"
