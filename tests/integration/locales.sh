#!/usr/bin/env bash
# Content per locale through a real `crier serve`, a real HTTP receiver and a
# real SMTP server: recipients whose locale is en, de-AT, pl and ja (given by
# the rules' recipients function) get the webhook and the email in their
# language, with the fallback de-AT -> de and Polish and Japanese plurals;
# a digest keeps its recipient's locale until its window closes; `crier try
# --locale` prints the same rendering, and refuses a bad tag.
. "$(dirname "$0")/../support/lib.sh"
new_db
start_receiver hooks
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
/usr/bin/python3 "$CRIER_SOURCE_DIR/tests/support/smtp_sink.py" --port "$port" --port-file "$WORK/smtp.port" \
    --log "$WORK/mail.jsonl" &
PIDS+=($!)
for _ in $(seq 100); do
    [ -s "$WORK/smtp.port" ] && break
    sleep 0.1
done

mkdir -p "$WORK/rules"
cat >"$WORK/rules/rules.lua" <<'LUA'
local crier = require "crier"
crier.event_type "comments.waiting" {
    payload = { post = "string", count = "integer", cents = "integer", people = "array" },
}
crier.rule "comments.waiting" {
    locale = "en",
    recipients = function(event) return event.payload.people end,
    channels = { "webhook", "email" },
    webhook = {
        url = crier.setting("url"),
        body = [[{"who": "{{ recipient.id }}", "locale": "{{ locale }}",
                  "text": "{{ payload.count | plural(one='# new comment', other='# new comments') }} on {{ payload.post }}"}]],
        locales = {
            de = { body = [[{"who": "{{ recipient.id }}", "locale": "{{ locale }}",
                  "text": "{{ payload.count | plural(one='# neuer Kommentar', other='# neue Kommentare') }} zu {{ payload.post }}"}]] },
            pl = { body = [[{"who": "{{ recipient.id }}", "locale": "{{ locale }}",
                  "text": "{{ payload.count | plural(one='# nowy komentarz', few='# nowe komentarze', many='# nowych komentarzy', other='# komentarza') }} do {{ payload.post }}"}]] },
            ja = { body = [[{"who": "{{ recipient.id }}", "locale": "{{ locale }}",
                  "text": "{{ payload.post }}に{{ payload.count | plural(other='#件') }}の新しいコメント"}]] },
        },
    },
    email = {
        from = "team@crier.test",
        subject = "Your plan: {{ payload.cents | money('EUR') }}",
        text = "Renews {{ '2026-01-05' | date('long') }}.",
        locales = {
            de = { subject = "Ihr Tarif: {{ payload.cents | money('EUR') }}",
                   text = "Verlängert am {{ '2026-01-05' | date('long') }}." },
            pl = { subject = "Twój plan: {{ payload.cents | money('EUR') }}" },
        },
    },
}
crier.event_type "comment.posted" { payload = { who = "array" } }
crier.rule "comment.posted" {
    locale = "en",
    recipients = function(event) return event.payload.who end,
    channels = { "webhook" },
    webhook = {
        url = crier.setting("url"),
        digest = { window = "2s", key = "posts", body = [[{"digest": "{{ recipient.id }}",
            "text": "{{ digest.count | plural(one='# comment', other='# comments') }}"}]] },
        locales = { pl = { digest = { body = [[{"digest": "{{ recipient.id }}",
            "text": "{{ digest.count | plural(one='# komentarz', few='# komentarze', many='# komentarzy', other='# komentarza') }}"}]] } } },
    },
}
LUA

people='[{"id": "ann", "email": "ann@acme.test", "locale": "en"},
         {"id": "anton", "email": "anton@acme.test", "locale": "de-AT"},
         {"id": "piotr", "email": "piotr@acme.test", "locale": "pl"},
         {"id": "yuki", "email": "yuki@acme.test", "locale": "ja"},
         {"id": "xena", "email": "xena@acme.test"}]'
payload="{\"post\": \"Release notes\", \"count\": 22, \"cents\": 123450, \"people\": $people}"

# ---- the shared tag vectors: what crier.set_recipient_settings stores
# (tests/vectors/locale_tags.tsv; tests/lua/locale_spec.lua checks the Lua side)
rows=0
while IFS= read -r line; do
    case "$line" in "#"* | tag$'\t'*) continue ;; esac
    tag=${line%%$'\t'*} # (not read's field splitting: it folds an empty first field)
    rest=${line#*$'\t'}
    stored=${rest%%$'\t'*}
    rows=$((rows + 1))
    if psql -XAtq "$CRIER_DATABASE_URL" -v ON_ERROR_STOP=1 -v tag="$tag" >/dev/null 2>&1 <<'SQL'; then
SELECT crier.set_recipient_settings('acme', 'vector', jsonb_build_object('locale', :'tag'::text))
SQL
        got=t
    else
        got=f
    fi
    assert_eq "$stored" "$got" "crier.set_recipient_settings and locale tag '$tag'"
done <"$CRIER_SOURCE_DIR/tests/vectors/locale_tags.tsv"
[ "$rows" -ge 25 ] || fail "locale_tags.tsv has $rows rows"
sql "DELETE FROM crier.recipient_settings WHERE recipient_id = 'vector'" >/dev/null

# ---- crier try --locale: the rendering a de-AT recipient gets, without a daemon
"$CRIER_BIN" try --rules "$WORK/rules" --no-db --set "url=$RECEIVER_URL" --tenant acme --type comments.waiting \
    --entity p1 --payload "$payload" --locale de-AT >"$WORK/try.out" 2>&1 || fail "crier try --locale: $(cat "$WORK/try.out")"
grep -q '^locale: de-AT' "$WORK/try.out" || fail "try names the locale: $(cat "$WORK/try.out")"
assert_eq 5 "$(grep -c '22 neue Kommentare zu Release notes' "$WORK/try.out")" "try --locale de-AT: every webhook in German"
assert_eq 5 "$(grep -c 'subject: Ihr Tarif: 1.234,50 €' "$WORK/try.out")" "try --locale de-AT: every subject in German"
assert_eq 5 "$(grep -c 'Verlängert am 5. Jänner 2026.' "$WORK/try.out")" "try --locale de-AT: Austrian month names"
# without --locale, each recipient's own
"$CRIER_BIN" try --rules "$WORK/rules" --no-db --set "url=$RECEIVER_URL" --tenant acme --type comments.waiting \
    --entity p1 --payload "$payload" >"$WORK/try2.out" 2>&1 || fail "crier try: $(cat "$WORK/try2.out")"
assert_eq 1 "$(grep -c '22 nowe komentarze do Release notes' "$WORK/try2.out")" "try: piotr's webhook in Polish"
# a bad tag is refused, saying what a tag looks like
if "$CRIER_BIN" try --rules "$WORK/rules" --no-db --set "url=$RECEIVER_URL" --tenant acme --type comments.waiting \
    --entity p1 --payload "$payload" --locale Deutsch >"$WORK/try3.out" 2>&1; then
    fail "try --locale Deutsch succeeded"
fi
grep -q '"Deutsch" is not a locale tag.*like "de", "de-AT"' "$WORK/try3.out" || fail "bad tag: $(cat "$WORK/try3.out")"

# ---- the daemon: each recipient's webhook and email in their language
"$CRIER_BIN" serve --rules "$WORK/rules" --poll 0.2 --set "url=$RECEIVER_URL" --smtp-url "smtp://127.0.0.1:$port" \
    >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
# (stored locale: see the block at the end)
sql "SELECT crier.emit('acme', 'comments.waiting', 'p1', '$payload')" >/dev/null
wait_for "SELECT count(*) = 10 FROM crier.deliveries WHERE state = 'delivered'" 30 "every delivery delivered"
stop_serve

/usr/bin/python3 - "$RECEIVER_LOG" "$WORK/mail.jsonl" <<'PY' || fail "contents per locale"
import email, email.policy, json, sys
hooks = {}
for line in open(sys.argv[1]):
    if line.strip():
        body = json.loads(json.loads(line)["body"])
        hooks[body["who"]] = (body["locale"], body["text"])
want = {
    "ann": ("en", "22 new comments on Release notes"),
    "anton": ("de-AT", "22 neue Kommentare zu Release notes"),   # de-AT -> de
    "piotr": ("pl", "22 nowe komentarze do Release notes"),      # few
    "yuki": ("ja", "Release notesに22件の新しいコメント"),
    "xena": ("en", "22 new comments on Release notes"),          # no locale: the rule's
}
assert hooks == want, hooks
mails = {}
for line in open(sys.argv[2]):
    if line.strip():
        m = json.loads(line)
        msg = email.message_from_string(m["data"], policy=email.policy.default)
        mails[m["rcpt_tos"][0].split("@")[0]] = (str(msg["Subject"]), msg.get_body(("plain",)).get_content().strip())
want = {
    "ann": ("Your plan: €1,234.50", "Renews January 5, 2026."),
    "anton": ("Ihr Tarif: 1.234,50 €", "Verlängert am 5. Jänner 2026."),
    "piotr": ("Twój plan: 1234,50 €", "Renews 5 stycznia 2026."),  # pl: subject only, the text falls back
    "yuki": ("Your plan: €1,234.50", "Renews January 5, 2026."),   # no ja email block: the default, in en
    "xena": ("Your plan: €1,234.50", "Renews January 5, 2026."),
}
assert mails == want, mails
PY

# ---- a digest: the window closes after the recipient's locale was planned
: >"$RECEIVER_LOG"
"$CRIER_BIN" serve --rules "$WORK/rules" --poll 0.2 --set "url=$RECEIVER_URL" --smtp-url "smtp://127.0.0.1:$port" \
    >"$WORK/serve-digest.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
who='[{"id": "ann", "locale": "en"}, {"id": "piotr", "locale": "pl"}, {"id": "ola", "locale": "pl"}]'
for i in 1 2 3; do
    sql "SELECT crier.emit('acme', 'comment.posted', 'c$i', '{\"who\": $who}')" >/dev/null
done
for _ in $(seq 300); do
    [ "$(requests_at "$RECEIVER_LOG")" -ge 3 ] && break
    sleep 0.1
done
stop_serve
/usr/bin/python3 - "$RECEIVER_LOG" <<'PY' || fail "digests per locale: $(cat "$RECEIVER_LOG")"
import json, sys
got = sorted(tuple(json.loads(json.loads(l)["body"]).values()) for l in open(sys.argv[1]) if l.strip())
assert got == [("ann", "3 comments"), ("ola", "3 komentarze"), ("piotr", "3 komentarze")], got
PY

# ---- a locale stored with crier.set_recipient_settings: the fan-out loads
# crier.recipient_settings.locale into recipient.locale, so xena, who has no
# locale in the rules, gets German once she stores "de".
: >"$RECEIVER_LOG"
sql "SELECT crier.set_recipient_settings('acme', 'xena', '{\"locale\": \"de\"}')" >/dev/null
"$CRIER_BIN" serve --rules "$WORK/rules" --poll 0.2 --set "url=$RECEIVER_URL" \
    --smtp-url "smtp://127.0.0.1:$port" >"$WORK/serve2.log" 2>&1 &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
one='[{"id": "xena", "email": "xena@acme.test"}]'
sql "SELECT crier.emit('acme', 'comments.waiting', 'p2',
     '{\"post\": \"Roadmap\", \"count\": 1, \"cents\": 500, \"people\": $one}')" >/dev/null
wait_for "SELECT count(*) = 2 FROM crier.deliveries d JOIN crier.notifications n ON n.id = d.notification_id
          WHERE n.entity_id = 'p2' AND d.state = 'delivered'" 30 "xena's deliveries"
stop_serve
grep -q '1 neuer Kommentar zu Roadmap' "$RECEIVER_LOG" || fail "stored locale de: $(cat "$RECEIVER_LOG")"
echo "ok"
