/* cmd_rules.c — the rule author's commands: `crier check` (load and validate the
 * rules the way a reload would) and `crier try` (run one event through them and
 * print the fan-out plan, touching nothing). */
#include "cli.h"
#include "database.h"
#include "json_writer.h"
#include "keys.h"
#include "log.h"
#include "migrate.h"
#include "rules_query.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char check_help[] =
    "usage: crier check [DIR] [options]\n"
    "\n"
    "Loads and validates every rule file in DIR (default: --rules) exactly as a reload\n"
    "would, and prints each problem as file:line: message. Exit status 1 on any.\n"
    "Then lists the recurring schedules the rules declare (crier.schedule) with their\n"
    "next occurrence.\n"
    "\noptions:\n" CLI_COMMON_HELP;

int crier_cmd_check(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS, {NULL, 0, NULL, 0}};
    crier_cli cli;
    crier_rules *rules;
    int rc = 2;

    crier_cli_init(&cli);
    if (crier_cli_parse(&cli, check_help, argc, argv, options, NULL, NULL, &rc))
        goto out;
    rc = 2;
    if (optind < argc)
        cli.rules_dir = argv[optind++];
    if (optind < argc) {
        crier_cli_error("check", "unexpected argument '%s' (see crier check --help)", argv[optind]);
        goto out;
    }
    rules = crier_cli_load_rules(&cli);
    if (!rules) {
        rc = 1;
        goto out;
    }
    printf("%s: ok (rules version %.12s)\n", cli.rules_dir, crier_rules_version(rules));
    {
        char err[1024];
        char *schedules = crier_rules_describe_schedules(rules, (double)time(NULL), err, sizeof err);
        if (!schedules) {
            crier_cli_error("check", "listing the schedules failed: %s", err);
            crier_rules_free(rules);
            rc = 1;
            goto out;
        }
        fputs(schedules, stdout);
        free(schedules);
    }
    crier_rules_free(rules);
    rc = 0;
out:
    crier_cli_free(&cli);
    return rc;
}

static const char try_help[] =
    "usage: crier try EVENT.json [options]\n"
    "       crier try --tenant T --type EVENT_TYPE --entity ID [--payload JSON] [options]\n"
    "\n"
    "Runs one event through the rules and prints the plan: recipients, channels,\n"
    "notification keys, rendered subjects and bodies, retry schedules, whether\n"
    "stored preferences would suppress a delivery, and its timing in words (delay,\n"
    "quiet hours, throttle, digest); people's stored time zone, locale and quiet\n"
    "hours apply as in crier serve. Changes nothing: the rules'\n"
    "queries (crier.query, crier.pages) run read-only in transactions that are\n"
    "rolled back. A database is used when one is configured (--database,\n"
    "CRIER_DATABASE_URL) or the embedded one exists; try never creates one. With\n"
    "--no-db (or none) queries need fake rows.\n"
    "EVENT.json is an object {\"tenant\": …, \"type\": …, \"entity_id\": …, \"payload\": {…}}\n"
    "(\"-\" reads it from standard input); it may add \"queries\": {\"NAME\": [rows…]}\n"
    "with fake rows for the rules' queries (then used instead of the database) and\n"
    "\"cursor\": \"…\" to show a later page of a paged audience.\n"
    "\noptions:\n"
    "  --locale TAG       render as for recipients whose locale is TAG (like de-AT:\n"
    "                     the rules' content for de-AT, else de, else the default)\n"
    "  --no-db            use no database (queries need \"queries\" in EVENT.json)\n" CLI_RULE_QUERY_HELP
    CLI_COMMON_HELP;

typedef struct {
    char *tenant, *type, *entity, *payload;
    char *queries; /* JSON object of fake rows by query name, or NULL */
    char *cursor;  /* page cursor, or NULL */
    char *locale;  /* --locale, or NULL */
    bool no_db;
} try_event;

/* Keeps a copy of a flag value in *slot (replacing an earlier one). */
static int try_keep(char **slot, const char *arg)
{
    free(*slot);
    *slot = strdup(arg);
    return *slot ? 0 : -1;
}

static int try_option(void *ud, int opt, const char *arg)
{
    try_event *ev = ud;
    switch (opt) {
    case 't': return try_keep(&ev->tenant, arg);
    case 'y': return try_keep(&ev->type, arg);
    case 'e': return try_keep(&ev->entity, arg);
    case 'p': return try_keep(&ev->payload, arg);
    case 'n': ev->no_db = true; return 0;
    case 'l': return try_keep(&ev->locale, arg);
    }
    return -1;
}

/* Decodes the event file with the crier Lua library's JSON decoder. */
static int try_parse_event(const crier_cli *cli, const char *text, try_event *ev, char *err, size_t err_len)
{
    static const char chunk[] =
        "local text = ...\n"
        "local json = require 'crier.json'\n"
        "local ok, ev = pcall(json.decode, text)\n"
        "if not ok or ev == nil then return nil, 'not valid JSON: ' .. tostring(ev) end\n"
        "if type(ev) ~= 'table' then return nil, 'the event must be a JSON object' end\n"
        "for _, f in ipairs({'tenant', 'type', 'entity_id'}) do\n"
        "  if type(ev[f]) ~= 'string' or ev[f] == '' then\n"
        "    return nil, 'field \"' .. f .. '\" must be a non-empty string' end\n"
        "end\n"
        "local p = ev.payload\n"
        "if p == nil then p = {} end\n"
        "if type(p) ~= 'table' then return nil, 'field \"payload\" must be an object' end\n"
        "local q = ev.queries\n"
        "if q ~= nil and (type(q) ~= 'table' or json.is_array(q)) then\n"
        "  return nil, 'field \"queries\" must be an object of query name to rows' end\n"
        "if ev.cursor ~= nil and type(ev.cursor) ~= 'string' then\n"
        "  return nil, 'field \"cursor\" must be a string' end\n"
        "return ev.tenant, ev.type, ev.entity_id, json.encode(p), q and json.encode(q), ev.cursor\n";
    lua_State *L = luaL_newstate();
    int rc = -1;

    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua", cli->lua_dir, cli->lua_dir);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    if (luaL_loadbuffer(L, chunk, sizeof chunk - 1, "=try") != 0) {
        snprintf(err, err_len, "%s", lua_tostring(L, -1));
        goto out;
    }
    lua_pushstring(L, text);
    if (lua_pcall(L, 1, 6, 0) != 0) {
        snprintf(err, err_len, "%s", lua_tostring(L, -1));
        goto out;
    }
    if (lua_isnil(L, -6)) {
        snprintf(err, err_len, "%s", lua_tostring(L, -5));
        goto out;
    }
    ev->tenant = strdup(lua_tostring(L, -6));
    ev->type = strdup(lua_tostring(L, -5));
    ev->entity = strdup(lua_tostring(L, -4));
    ev->payload = strdup(lua_tostring(L, -3));
    ev->queries = lua_isstring(L, -2) ? strdup(lua_tostring(L, -2)) : NULL;
    ev->cursor = lua_isstring(L, -1) ? strdup(lua_tostring(L, -1)) : NULL;
    rc = 0;
out:
    lua_close(L);
    return rc;
}

/* crier_rules_batch_recipients' callback: the recipient ids as a JSON array. */
static int try_add_recipient(void *ud, const char *tenant, const char *recipient_id)
{
    crier_json_buf *ids = ud;
    (void)tenant;
    crier_json_buf_puts(ids, ids->len > 1 ? "," : "");
    crier_json_buf_string(ids, recipient_id);
    return 0;
}

/* The people's stored settings (time zone, locale, quiet hours:
 * crier.recipient_settings) for the plan, as crier serve's fan-out loads them:
 * the rules list the event's recipients, one read-only statement reads their
 * rows, the rules apply them (they win over the rules' fields). A failure
 * is a warning: the plan is then made without them. */
static void try_load_settings(crier_rules *rules, crier_rules_query *q, const crier_rule_event *rev)
{
    static const char sql[] =
        "SELECT tenant, recipient_id, time_zone, locale, quiet_hours::text AS quiet_hours"
        " FROM crier.recipient_settings"
        " WHERE tenant = $1 AND recipient_id IN (SELECT jsonb_array_elements_text($2::jsonb))";
    crier_json_buf ids = {0};
    char err[512];
    crier_json_buf_puts(&ids, "[");
    (void)crier_rules_batch_recipients(rules, rev, try_add_recipient, &ids);
    crier_json_buf_puts(&ids, "]");
    const char *values[2] = {rev->tenant, ids.data};
    PGresult *res = crier_rules_query_run(q, sql, 2, values, err, sizeof err);
    crier_json_buf_free(&ids);
    if (!res) {
        crier_warn("try", "the recipients' stored settings could not be read (%s); planned without them", err);
        return;
    }
    if (crier_rules_set_batch_settings(rules, res) != 0)
        crier_warn("try", "the recipients' stored settings could not be handed to the rules; planned without them");
    PQclear(res);
}

/* Whether stored preferences would suppress a delivery (the engine's rule, in
 * SQL, read-only). Writes a description into out; "" when no database. */
static void try_preference(crier_rules_query *q, const try_event *ev, const char *recipient,
                           const crier_plan_delivery *pd, char *out, size_t len)
{
    static const char sql[] =
        "SELECT enabled, event_type, channel FROM crier.preferences"
        " WHERE tenant = $1 AND recipient_id = $2 AND event_type IN ($3, '*') AND channel IN ($4, '*')"
        " ORDER BY (event_type <> '*') DESC, (channel <> '*') DESC LIMIT 1";
    const char *values[4] = {ev->tenant, recipient, ev->type, pd->channel};
    char err[512];
    out[0] = '\0';
    if (!pd->honor_preferences) {
        snprintf(out, len, "not applied (required event type, or the rule says preferences = \"ignore\")");
        return;
    }
    if (!q)
        return;
    PGresult *res = crier_rules_query_run(q, sql, 4, values, err, sizeof err);
    if (!res) {
        snprintf(out, len, "unknown (%s)", err);
        return;
    }
    if (PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 'f')
        snprintf(out, len, "SUPPRESSED by the stored preference (event type %s, channel %s)", PQgetvalue(res, 0, 1),
                 PQgetvalue(res, 0, 2));
    else if (PQntuples(res) == 1)
        snprintf(out, len, "allowed by the stored preference (event type %s, channel %s)", PQgetvalue(res, 0, 1),
                 PQgetvalue(res, 0, 2));
    else
        snprintf(out, len, "none stored: delivered");
    PQclear(res);
}

/* The timing of a planned delivery (its JSON, crier_plan_delivery.timing) in
 * words, by crier.timing.describe in *L (a plain Lua state with the crier
 * library, opened on first use; the caller closes it). Writes the words, or
 * the JSON with why it could not be described, into out. */
static void try_timing_words(const crier_cli *cli, lua_State **L, const char *timing, char *out, size_t len)
{
    static const char chunk[] = "local timing = require 'crier.timing'\n"
                                "return function(text) return timing.describe(text) end\n";
    if (!*L) {
        *L = luaL_newstate();
        luaL_openlibs(*L);
        lua_getglobal(*L, "package");
        lua_pushfstring(*L, "%s/?.lua;%s/?/init.lua", cli->lua_dir, cli->lua_dir);
        lua_setfield(*L, -2, "path");
        lua_pop(*L, 1);
        if (luaL_loadbuffer(*L, chunk, sizeof chunk - 1, "=try") != 0 || lua_pcall(*L, 0, 1, 0) != 0) {
            snprintf(out, len, "%s (not described: %s)", timing, lua_tostring(*L, -1));
            lua_close(*L);
            *L = NULL;
            return;
        }
        lua_setfield(*L, LUA_REGISTRYINDEX, "crier_try_describe");
    }
    lua_getfield(*L, LUA_REGISTRYINDEX, "crier_try_describe");
    lua_pushstring(*L, timing);
    if (lua_pcall(*L, 1, 2, 0) != 0)
        snprintf(out, len, "%s (not described: %s)", timing, lua_tostring(*L, -1));
    else if (!lua_isstring(*L, -2))
        snprintf(out, len, "%s (not described: %s)", timing, lua_tostring(*L, -1));
    else
        snprintf(out, len, "%s", lua_tostring(*L, -2));
    lua_settop(*L, 0);
}

static void try_print_plan(const crier_cli *cli, const try_event *ev, const crier_plan *plan,
                           const crier_rules *rules, crier_rules_query *q)
{
    lua_State *words = NULL; /* for crier.timing.describe */
    char timing[2048];
    char pref[600];
    char key[4096], uuid[CRIER_KEY_UUID_LEN + 1], id[CRIER_KEY_ID_LEN + 1];
    uint8_t h[CRIER_KEY_HASH_LEN];

    printf("event: tenant=%s type=%s entity=%s\n", ev->tenant, ev->type, ev->entity);
    printf("rules version: %.12s\n", crier_rules_version(rules));
    printf("lock key: %lld\n", (long long)crier_key_lock(ev->tenant, ev->type, ev->entity));
    if (ev->locale)
        printf("locale: %s (--locale: every recipient's)\n", ev->locale);
    printf("recipients: %zu\n", plan->n_recipients);
    for (size_t i = 0; i < plan->n_recipients; i++) {
        const crier_plan_recipient *r = &plan->recipients[i];
        crier_key_parts kp = {ev->tenant, ev->type, ev->entity, r->recipient, r->discriminator};
        crier_key_readable(&kp, key, sizeof key);
        crier_key_hash(&kp, h);
        crier_key_hash_uuid(h, uuid);
        crier_key_hash_id(h, id);
        printf("\n- recipient: %s\n", r->recipient);
        if (r->discriminator)
            printf("  discriminator: %s\n", r->discriminator);
        printf("  key: %s\n  key hash: %s\n  message id: %s\n", key, uuid, id);
        for (size_t d = r->first_delivery; d < r->first_delivery + r->n_deliveries; d++) {
            const crier_plan_delivery *pd = &plan->deliveries[d];
            bool webhook = !strcmp(pd->channel, "webhook"), email = !strcmp(pd->channel, "email");
            printf("  channel: %s\n", pd->channel);
            printf("    %s: %s\n", webhook ? "url" : email ? "to" : "topic", pd->target);
            if (webhook)
                printf("    signed: %s\n", pd->secret ? (strchr(pd->secret, ' ') ? "yes (several secrets)" : "yes")
                                                   : "no");
            if (email)
                printf("    from: %s\n    subject: %s\n", pd->sender ? pd->sender : "(the configured --email-from)",
                       pd->subject ? pd->subject : "");
            printf("    %s: %.*s\n", email ? "text" : "body", (int)pd->body_len, pd->body);
            if (pd->html)
                printf("    html: %s\n", pd->html);
            printf("    retry schedule (s): %s\n", pd->retry ? pd->retry : "the channel's default");
            try_preference(q, ev, r->recipient, pd, pref, sizeof pref);
            if (pref[0])
                printf("    preferences: %s\n", pref);
            if (pd->timing) {
                try_timing_words(cli, &words, pd->timing, timing, sizeof timing);
                printf("    timing: %s\n", timing);
            }
        }
    }
    if (words)
        lua_close(words);
    if (plan->next_cursor)
        printf("\nmore recipients: this was one page of a paged audience; the next page starts after %s\n"
               "(add \"cursor\": \"%s\" to EVENT.json to see it)\n",
               plan->next_cursor, plan->next_cursor);
}

/* A database is used when one is configured, or when the embedded cluster
 * exists already: try never creates one. */
static bool try_has_database(const crier_cli *cli)
{
    char path[2100];
    const char *dir = cli->data_dir ? cli->data_dir : getenv("CRIER_DATA_DIR");
    if (cli->database || getenv("CRIER_DATABASE_URL"))
        return true;
    snprintf(path, sizeof path, "%s/PG_VERSION", dir ? dir : CRIER_DEFAULT_DATA_DIR);
    return access(path, F_OK) == 0;
}

int crier_cmd_try(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            CLI_RULE_QUERY_OPTIONS,
                                            {"tenant", required_argument, NULL, 't'},
                                            {"type", required_argument, NULL, 'y'},
                                            {"entity", required_argument, NULL, 'e'},
                                            {"payload", required_argument, NULL, 'p'},
                                            {"no-db", no_argument, NULL, 'n'},
                                            {"locale", required_argument, NULL, 'l'},
                                            {NULL, 0, NULL, 0}};
    crier_cli cli;
    try_event ev = {0};
    crier_rules *rules = NULL;
    crier_plan plan = {0};
    crier_rules_query *query = NULL;
    crier_rules_query *prefs = NULL; /* crier's own role, read-only: the stored preferences */
    crier_database db;
    bool db_open = false;
    char err[16384];
    int rc = 2;

    crier_cli_init(&cli);
    if (crier_cli_parse(&cli, try_help, argc, argv, options, try_option, &ev, &rc))
        goto out;
    rc = 2;
    if (optind < argc) {
        char *text = crier_cli_read_file(argv[optind]);
        if (!text) {
            crier_cli_error("try", "cannot read %s: %m", argv[optind]);
            goto out;
        }
        bool no_db = ev.no_db;
        char *locale = ev.locale;
        free(ev.tenant);
        free(ev.type);
        free(ev.entity);
        free(ev.payload);
        memset(&ev, 0, sizeof ev);
        ev.no_db = no_db;
        ev.locale = locale;
        int r = try_parse_event(&cli, text, &ev, err, sizeof err);
        free(text);
        if (r < 0) {
            crier_cli_error("try", "%s: %s", argv[optind], err);
            goto out;
        }
    }
    if (!ev.tenant || !ev.type || !ev.entity) {
        crier_cli_error("try", "give EVENT.json, or --tenant, --type and --entity (see crier try --help)");
        goto out;
    }
    if (!ev.payload)
        ev.payload = strdup("{}");
    rc = 1;
    rules = crier_cli_load_rules(&cli);
    if (!rules)
        goto out;
    if (ev.locale && crier_rules_set_recipient_locale(rules, ev.locale, err, sizeof err) < 0) {
        crier_cli_error("try", "%s", err);
        rc = 2;
        goto out;
    }
    if (ev.queries) {
        if (crier_rules_set_fake_queries(rules, ev.queries, err, sizeof err) < 0) {
            crier_cli_error("try", "%s", err);
            goto out;
        }
    } else if (!ev.no_db && try_has_database(&cli)) {
        if (crier_database_open(cli.database, cli.data_dir, false, &db, err, sizeof err) < 0) {
            crier_cli_error("try", "%s (or use --no-db)", err);
            goto out;
        }
        db_open = true;
        {
            /* an unreachable database only fails the rules that query it; an
             * unmigrated one would fail every query and preference lookup */
            PGconn *conn = PQconnectdb(db.conninfo);
            int unmigrated = PQstatus(conn) == CONNECTION_OK && crier_migrate_check(conn, err, sizeof err) < 0;
            PQfinish(conn);
            if (unmigrated) {
                crier_cli_error("try", "%s (or use --no-db)", err);
                goto out;
            }
        }
        if (crier_database_rules(&db, cli.rules_database, err, sizeof err) < 0) {
            crier_cli_error("try", "--rules-database: %s", err);
            goto out;
        }
        query = crier_rules_query_new(db.rules_conninfo, 0, crier_cli_rule_query_role(&cli));
        if (query)
            crier_rules_set_query(rules, crier_rules_query_run, query);
        prefs = crier_rules_query_new(db.conninfo, 0, CRIER_RULES_QUERY_CRIER_OWN);
    }
    crier_rule_event rev = {.id = 0, .tenant = ev.tenant, .event_type = ev.type, .entity_id = ev.entity,
                            .payload_json = ev.payload, .cursor = ev.cursor, .slot = 0};
    if (prefs && !ev.queries)
        try_load_settings(rules, prefs, &rev);
    crier_plan_status planned = crier_rules_plan(rules, &rev, &plan, err, sizeof err);
    crier_rules_end_batch(rules);
    if (planned != CRIER_PLAN_OK) {
        crier_cli_error("try", "%s", err);
        goto out;
    }
    try_print_plan(&cli, &ev, &plan, rules, ev.queries ? NULL : prefs);
    rc = 0;
out:
    crier_rules_query_free(query);
    crier_rules_query_free(prefs);
    if (db_open)
        crier_database_close(&db);
    free(ev.queries);
    free(ev.cursor);
    free(ev.locale);
    crier_plan_free(&plan);
    crier_rules_free(rules);
    free(ev.tenant);
    free(ev.type);
    free(ev.entity);
    free(ev.payload);
    crier_cli_free(&cli);
    return rc;
}
