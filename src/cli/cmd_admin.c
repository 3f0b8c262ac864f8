/* cmd_admin.c — the operator's small commands: `crier migrate`, `crier emit`,
 * `crier status` and `crier cluster` (the private PostgreSQL cluster). */
#include "cli.h"
#include "log.h"
#include "migrate.h"
#include "pg_cluster.h"
#include "time_arg.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses only the common options and refuses positional arguments; returns 0
 * to continue, 1 when the caller should exit with *rc. */
static int admin_parse(const char *cmd, const char *help, int argc, char **argv, crier_cli *cli, int *rc)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS, {NULL, 0, NULL, 0}};
    if (crier_cli_parse(cli, help, argc, argv, options, NULL, NULL, rc))
        return 1;
    if (optind < argc) {
        crier_cli_error(cmd, "unexpected argument '%s' (see crier %s --help)", argv[optind], cmd);
        *rc = 2;
        return 1;
    }
    return 0;
}

static const char migrate_help[] =
    "usage: crier migrate [options]\n"
    "\n"
    "Applies the schema crier under an advisory lock: pending numbered migrations,\n"
    "then every function file (sql/functions/) that changed. Safe to run twice or\n"
    "from two processes at once. Says what it applied.\n"
    "\noptions:\n" CLI_COMMON_HELP;

int crier_cmd_migrate(int argc, char **argv)
{
    crier_cli cli;
    crier_database db;
    char err[4096];
    int rc = 1;

    crier_cli_init(&cli);
    if (admin_parse("migrate", migrate_help, argc, argv, &cli, &rc))
        goto out;
    if (crier_database_open(cli.database, cli.data_dir, false, &db, err, sizeof err) < 0) {
        crier_cli_error("migrate", "%s", err);
        goto out;
    }
    if (crier_migrate_run(db.conninfo, stdout, err, sizeof err) < 0)
        crier_cli_error("migrate", "%s", err);
    else
        rc = 0;
    crier_database_close(&db);
out:
    crier_cli_free(&cli);
    return rc;
}

static const char emit_help[] =
    "usage: crier emit --tenant T --type EVENT_TYPE --entity ID [--payload JSON|@FILE]\n"
    "                  [--dedupe-key KEY] [--not-before TIME] [--no-validate] [options]\n"
    "\n"
    "Emits one event through crier.emit() and prints its id (the existing id when an\n"
    "event with the same tenant and dedupe key exists). The event type and payload are\n"
    "checked against the rules first unless --no-validate is given.\n"
    "\n"
    "  --not-before TIME  a scheduled send: the event fans out at TIME, not before\n"
    "                     (once). TIME is RFC 3339 with its offset\n"
    "                     (2026-03-01T08:00:00+01:00, ...Z) or +N followed by s, m, h\n"
    "                     or d, from now (+10m). A past time is an ordinary emit; a\n"
    "                     re-emit of the dedupe key keeps the first call's time.\n"
    "\noptions:\n" CLI_COMMON_HELP;

typedef struct {
    const char *tenant, *type, *entity, *payload_arg, *dedupe, *not_before;
    char not_before_buf[32];
    bool validate;
} emit_args;

static int emit_option(void *ud, int opt, const char *arg)
{
    emit_args *a = ud;
    switch (opt) {
    case 't': a->tenant = arg; return 0;
    case 'y': a->type = arg; return 0;
    case 'e': a->entity = arg; return 0;
    case 'p': a->payload_arg = arg; return 0;
    case 'k': a->dedupe = arg; return 0;
    case 'n': a->validate = false; return 0;
    case 'b':
        a->not_before = crier_time_not_before(arg, a->not_before_buf, sizeof a->not_before_buf);
        if (!a->not_before) {
            crier_cli_error("emit", "--not-before '%s' is not a time: give RFC 3339 with its offset "
                                    "(2026-03-01T08:00:00Z, 2026-03-01T09:00:00+01:00) or +N followed by "
                                    "s, m, h or d (+10m)", arg);
            return -1;
        }
        return 0;
    }
    return -1;
}

int crier_cmd_emit(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"tenant", required_argument, NULL, 't'},
                                            {"type", required_argument, NULL, 'y'},
                                            {"entity", required_argument, NULL, 'e'},
                                            {"payload", required_argument, NULL, 'p'},
                                            {"dedupe-key", required_argument, NULL, 'k'},
                                            {"no-validate", no_argument, NULL, 'n'},
                                            {"not-before", required_argument, NULL, 'b'},
                                            {NULL, 0, NULL, 0}};
    crier_cli cli;
    crier_database db;
    emit_args a = {.payload_arg = "{}", .validate = true};
    char *payload_owned = NULL;
    const char *payload;
    char err[8192];
    int rc = 2;

    crier_cli_init(&cli);
    if (crier_cli_parse(&cli, emit_help, argc, argv, options, emit_option, &a, &rc))
        goto out;
    rc = 2;
    if (optind < argc) {
        crier_cli_error("emit", "unexpected argument '%s' (see crier emit --help)", argv[optind]);
        goto out;
    }
    if (!a.tenant || !a.type || !a.entity) {
        crier_cli_error("emit", "--tenant, --type and --entity are required (see crier emit --help)");
        goto out;
    }
    payload = a.payload_arg;
    if (payload[0] == '@') {
        payload = payload_owned = crier_cli_read_file(a.payload_arg + 1);
        if (!payload) {
            crier_cli_error("emit", "cannot read payload file %s: %m", a.payload_arg + 1);
            goto out;
        }
    }
    rc = 1;
    if (a.validate) {
        crier_rules *rules = crier_cli_load_rules(&cli);
        if (!rules) {
            crier_cli_error("emit", "the rules in %s do not load (fix them, or pass --no-validate)", cli.rules_dir);
            goto out;
        }
        crier_plan_status st = crier_rules_validate(rules, a.type, payload, err, sizeof err);
        crier_rules_free(rules);
        if (st != CRIER_PLAN_OK) {
            crier_cli_error("emit", "event refused, nothing was stored: %s", err);
            goto out;
        }
    }
    {
        PGconn *conn = crier_cli_connect("emit", &cli, &db);
        const char *params[6] = {a.tenant, a.type, a.entity, payload, a.dedupe, a.not_before};
        PGresult *res;
        if (!conn)
            goto out;
        res = PQexecParams(conn, "SELECT crier.emit($1, $2, $3, $4::jsonb, $5, $6::timestamptz)", 6, NULL, params,
                           NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_TUPLES_OK) {
            printf("%s\n", PQgetvalue(res, 0, 0));
            rc = 0;
        } else {
            crier_cli_error("emit", "event refused, nothing was stored: %s", PQresultErrorMessage(res));
        }
        PQclear(res);
        PQfinish(conn);
    }
    crier_database_close(&db);
out:
    free(payload_owned);
    crier_cli_free(&cli);
    return rc;
}

static const char status_help[] =
    "usage: crier status [options]\n"
    "\n"
    "Prints the state of the outbox: events, notifications and deliveries by state,\n"
    "paused and disabled endpoints, the oldest pending event's age, the timers\n"
    "(pending delays and digests with the earliest due time and how late it is, those\n"
    "fired in the last hour, deliveries and digests held by their recipients' quiet\n"
    "hours, digests whose rendering keeps failing), the open digest windows and the\n"
    "next to close, scheduled sends (pending send timers) and the recurring schedules\n"
    "(per schedule and tenant: cron, zone, next occurrence, last fired, last error),\n"
    "each crier serve worker of the last hour: alive\n"
    "(with what it has in flight), stopped, or dead (3 missed heartbeats), its rules\n"
    "version (and its last rejected reload, with the problems as file:line: message), and the\n"
    "latest dead letters (crier dead list shows all).\n"
    "\noptions:\n" CLI_COMMON_HELP;

/* A timestamp in status lines: UTC, to the second, ISO 8601. */
#define STATUS_TIME(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"

/* Prints "in N s" or "N s overdue" for a number of seconds until a due time. */
static void status_print_due(const char *seconds_until)
{
    long long s = strtoll(seconds_until, NULL, 10);
    if (s >= 0)
        printf("in %lld s", s);
    else
        printf("%lld s overdue", -s);
}

/* Prints the timers section: pending timers by kind (the earliest due, how
 * late), timers fired in the last hour, digest timers whose rendering keeps
 * failing, open digest windows and the next to close (sql/013_timers.sql).
 * Returns 0, or -1 after printing what failed. */
static int status_timers(PGconn *conn)
{
    int rc = -1;
    PGresult *res = PQexec(
        conn, "SELECT k.kind, count(t.id), " STATUS_TIME("min(t.due_at)") ","
              " floor(extract(epoch FROM min(t.due_at) - now()))::bigint"
              " FROM (VALUES ('delay'), ('digest'), ('send')) AS k(kind)"
              " LEFT JOIN crier.timers t ON t.kind = k.kind AND t.state = 'pending'"
              " GROUP BY k.kind ORDER BY k.kind");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        goto out;
    for (int i = 0; i < PQntuples(res); i++) {
        printf("timers.pending.%s: %s", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
        if (!PQgetisnull(res, i, 2)) {
            printf(" (earliest due %s, ", PQgetvalue(res, i, 2));
            status_print_due(PQgetvalue(res, i, 3));
            putchar(')');
        }
        putchar('\n');
    }
    PQclear(res);
    /* held by quiet hours (crier.release_delivery, crier.fire_timers): their timers say so */
    res = PQexec(conn, "SELECT count(delivery_id), count(digest_id), " STATUS_TIME("min(due_at)") ","
                       " floor(extract(epoch FROM min(due_at) - now()))::bigint"
                       " FROM crier.timers WHERE state = 'pending' AND outcome = 'quiet hours'");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        goto out;
    if (!PQgetisnull(res, 0, 2)) {
        printf("timers.quiet_hours: %s deliveries, %s digests held by their recipients' quiet hours (the first "
               "ends at %s, ",
               PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2));
        status_print_due(PQgetvalue(res, 0, 3));
        printf(")\n");
    }
    PQclear(res);
    res = PQexec(conn, "SELECT count(*) FILTER (WHERE state = 'fired' AND fired_at > now() - interval '1 hour'),"
                       " count(*) FILTER (WHERE state = 'fired' AND fired_at > now() - interval '1 hour'"
                       "     AND kind = 'delay'),"
                       " count(*) FILTER (WHERE state = 'fired' AND fired_at > now() - interval '1 hour'"
                       "     AND kind = 'digest'),"
                       " count(*) FILTER (WHERE state = 'pending' AND outcome LIKE 'render failed:%'),"
                       " count(*) FILTER (WHERE state = 'dead')"
                       " FROM crier.timers WHERE state <> 'pending' OR outcome IS NOT NULL");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        goto out;
    printf("timers.fired_last_hour: %s (delay %s, digest %s)\n", PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
           PQgetvalue(res, 0, 2));
    printf("timers.render_failing: %s\n", PQgetvalue(res, 0, 3));
    if (strcmp(PQgetvalue(res, 0, 4), "0"))
        printf("timers.dead: %s\n", PQgetvalue(res, 0, 4));
    PQclear(res);
    res = PQexec(conn, "SELECT t.id, t.digest_id, t.tenant, g.recipient_id, g.channel, g.digest_key, t.attempts,"
                       " " STATUS_TIME("t.due_at") ", left(split_part(t.outcome, E'\\n', 1), 300)"
                       " FROM crier.timers t LEFT JOIN crier.digests g ON g.id = t.digest_id"
                       " WHERE t.state = 'pending' AND t.outcome LIKE 'render failed:%'"
                       " ORDER BY t.attempts DESC, t.id LIMIT 5");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        goto out;
    for (int i = 0; i < PQntuples(res); i++)
        printf("timer %s (digest %s of %s for %s on %s, key %s): %s attempts, next at %s: %s\n",
               PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), PQgetvalue(res, i, 3),
               PQgetvalue(res, i, 4), PQgetvalue(res, i, 5), PQgetvalue(res, i, 6), PQgetvalue(res, i, 7),
               PQgetvalue(res, i, 8));
    PQclear(res);
    res = PQexec(conn, "SELECT c.open, c.closed, g.id, g.tenant, g.recipient_id, g.channel, g.digest_key, g.items,"
                       " " STATUS_TIME("g.window_end") ", floor(extract(epoch FROM g.window_end - now()))::bigint"
                       " FROM (SELECT count(*) FILTER (WHERE state = 'open') AS open,"
                       "           count(*) FILTER (WHERE state = 'closed') AS closed"
                       "       FROM crier.digests WHERE state <> 'sent') c"
                       " LEFT JOIN LATERAL (SELECT * FROM crier.digests WHERE state = 'open'"
                       "     ORDER BY window_end, id LIMIT 1) g ON true");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        goto out;
    printf("digests.open: %s", PQgetvalue(res, 0, 0));
    if (!PQgetisnull(res, 0, 2)) {
        printf(" (next to close: digest %s of %s for %s on %s, key %s, %s items, at %s, ", PQgetvalue(res, 0, 2),
               PQgetvalue(res, 0, 3), PQgetvalue(res, 0, 4), PQgetvalue(res, 0, 5), PQgetvalue(res, 0, 6),
               PQgetvalue(res, 0, 7), PQgetvalue(res, 0, 8));
        status_print_due(PQgetvalue(res, 0, 9));
        putchar(')');
    }
    putchar('\n');
    if (strcmp(PQgetvalue(res, 0, 1), "0"))
        printf("digests.closed: %s (no more items: max_items reached or the window ended; sent at their "
               "timers' next pass)\n",
               PQgetvalue(res, 0, 1));
    rc = 0;
out:
    if (rc < 0)
        crier_cli_error("status", "timers: %s", PQresultErrorMessage(res));
    PQclear(res);
    return rc;
}

/* Prints the recurring schedules (sql/019_schedules.sql): one line per
 * schedule and tenant with its next occurrence and when it last fired, and
 * its last error. Returns 0, or -1 after printing what failed. */
static int status_schedules(PGconn *conn)
{
    PGresult *res = PQexec(
        conn, "SELECT name, tenant, cron, time_zone, catch_up, " STATUS_TIME("next_occurrence") ","
              " floor(extract(epoch FROM next_occurrence - now()))::bigint, " STATUS_TIME("last_occurrence") ","
              " " STATUS_TIME("last_fired_at") ", left(last_error, 300), (SELECT count(*) FROM crier.schedules)"
              " FROM crier.schedules ORDER BY name, tenant LIMIT 50");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        crier_cli_error("status", "schedules: %s", PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    printf("schedules: %s\n", PQntuples(res) ? PQgetvalue(res, 0, 10) : "0");
    for (int i = 0; i < PQntuples(res); i++) {
        printf("schedule %s (tenant %s): \"%s\" in %s, catch_up %s; next ", PQgetvalue(res, i, 0),
               PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 4));
        if (PQgetisnull(res, i, 5)) {
            printf("none");
        } else {
            printf("%s (", PQgetvalue(res, i, 5));
            status_print_due(PQgetvalue(res, i, 6));
            putchar(')');
        }
        if (PQgetisnull(res, i, 8))
            printf("; never fired");
        else
            printf("; last fired %s for the occurrence %s", PQgetvalue(res, i, 8), PQgetvalue(res, i, 7));
        putchar('\n');
        if (!PQgetisnull(res, i, 9))
            printf("  last error: %s\n", PQgetvalue(res, i, 9));
    }
    PQclear(res);
    return 0;
}

/* Prints the outbox's state from the database of conn. Returns the exit
 * status: 0, or 1 after printing what failed. */
static int status_print(PGconn *conn)
{
    int rc = 1;
    PGresult *res = PQexec(conn,
                 "SELECT 'events', state, count(*) FROM crier.events GROUP BY state"
                 " UNION ALL SELECT 'notifications', 'total', count(*) FROM crier.notifications"
                 " UNION ALL SELECT 'deliveries', crier.delivery_state(state, lease_until), count(*)"
                 "     FROM crier.deliveries"
                 "     GROUP BY 2"
                 " UNION ALL SELECT 'endpoints', state, count(*) FROM crier.endpoints"
                 "     WHERE state <> 'active' GROUP BY state"
                 " ORDER BY 1, 2");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        crier_cli_error("status", "%s", PQresultErrorMessage(res));
        goto out;
    }
    for (int i = 0; i < PQntuples(res); i++)
        printf("%s.%s: %s\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
    PQclear(res);
    res = PQexec(conn, "SELECT coalesce(extract(epoch FROM now() - min(created_at))::bigint, 0)"
                       " FROM crier.events WHERE state = 'pending'");
    if (PQresultStatus(res) == PGRES_TUPLES_OK)
        printf("outbox.oldest_pending_seconds: %s\n", PQgetvalue(res, 0, 0));
    PQclear(res);
    res = NULL;
    if (status_timers(conn) < 0 || status_schedules(conn) < 0)
        goto out;
    res = PQexec(conn, "SELECT * FROM (SELECT 'event ' || id || ': ' || left(last_error, 200), processed_at"
                       "  FROM crier.events WHERE state = 'dead' ORDER BY processed_at DESC LIMIT 5) e"
                       " UNION ALL SELECT * FROM (SELECT 'delivery ' || id || ' (' || channel || '): '"
                       "  || left(last_error, 200), dead_at FROM crier.deliveries WHERE state = 'dead'"
                       "  ORDER BY dead_at DESC LIMIT 5) d ORDER BY 2 DESC NULLS LAST LIMIT 5");
    if (PQresultStatus(res) == PGRES_TUPLES_OK)
        for (int i = 0; i < PQntuples(res); i++)
            printf("dead: %s\n", PQgetvalue(res, i, 0));
    PQclear(res);
    res = PQexec(conn, "SELECT worker, left(version, 12), loaded_at, reloads_ok, reloads_failed,"
                       " last_error, last_error_at, round(extract(epoch FROM now() - coalesce(heartbeat_at,"
                       " updated_at))), crier.worker_state(heartbeat_at, heartbeat_interval, stopped_at),"
                       " heartbeat_interval, events_in_flight, deliveries_in_flight, events_fanned_out,"
                       " deliveries_claimed, " STATUS_TIME("stopped_at")
                       " FROM crier.rules_status"
                       " ORDER BY crier.worker_state(heartbeat_at, heartbeat_interval, stopped_at), updated_at DESC");
    if (PQresultStatus(res) == PGRES_TUPLES_OK) {
        int n[3] = {0, 0, 0}; /* alive, dead, stopped */
        for (int i = 0; i < PQntuples(res); i++) {
            const char *state = PQgetvalue(res, i, 8);
            n[!strcmp(state, "alive") ? 0 : !strcmp(state, "dead") ? 1 : 2]++;
        }
        printf("workers: %d alive, %d dead, %d stopped (a worker is dead after 3 missed heartbeats)\n", n[0],
               n[1], n[2]);
        for (int i = 0; i < PQntuples(res); i++) {
            const char *state = PQgetvalue(res, i, 8);
            double every = strtod(PQgetvalue(res, i, 9), NULL);
            printf("worker %s: ", PQgetvalue(res, i, 0));
            if (!strcmp(state, "alive"))
                printf("alive (heartbeat %ss ago, every %gs): %s events and %s deliveries in flight, %s events "
                       "fanned out and %s deliveries claimed since it started; ",
                       PQgetvalue(res, i, 7), every, PQgetvalue(res, i, 10), PQgetvalue(res, i, 11),
                       PQgetvalue(res, i, 12), PQgetvalue(res, i, 13));
            else if (!strcmp(state, "dead"))
                printf("DEAD (no heartbeat for %ss; dead after %gs): ", PQgetvalue(res, i, 7), 3 * every);
            else
                printf("stopped at %s: ", PQgetvalue(res, i, 14));
            printf("rules %s since %s (reloads: %s ok, %s rejected)\n", PQgetvalue(res, i, 1),
                   PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 4));
            if (!PQgetisnull(res, i, 5)) {
                printf("  last reload rejected at %s:\n    ", PQgetvalue(res, i, 6));
                for (const char *c = PQgetvalue(res, i, 5); *c; c++)
                    fputs(*c == '\n' ? "\n    " : (char[2]){*c, 0}, stdout);
                putchar('\n');
            }
        }
    }
    PQclear(res);
    res = PQexec(conn, "SELECT state || ': ' || tenant || ' ' || target || ' since ' || failing_since"
                       " FROM crier.endpoints WHERE state <> 'active' ORDER BY updated_at DESC LIMIT 5");
    if (PQresultStatus(res) == PGRES_TUPLES_OK)
        for (int i = 0; i < PQntuples(res); i++)
            printf("endpoint %s\n", PQgetvalue(res, i, 0));
    rc = 0;
out:
    PQclear(res);
    return rc;
}

int crier_cmd_status(int argc, char **argv)
{
    crier_cli cli;
    crier_database db;
    PGconn *conn;
    int rc = 1;

    crier_cli_init(&cli);
    if (admin_parse("status", status_help, argc, argv, &cli, &rc))
        goto out;
    conn = crier_cli_connect("status", &cli, &db);
    if (!conn)
        goto out;
    rc = status_print(conn);
    PQfinish(conn);
    crier_database_close(&db);
out:
    crier_cli_free(&cli);
    return rc;
}

static const char cluster_help[] =
    "usage: crier cluster start [--fast] DIR\n"
    "       crier cluster stop DIR\n"
    "       crier cluster url DIR\n"
    "\n"
    "Manages a private PostgreSQL cluster in DIR (the embedded default's mechanism,\n"
    "also used by tests and benchmarks): start initialises it on first use and prints\n"
    "its libpq connection string; it listens on a unix socket only. As root the\n"
    "server runs as the postgres user. --fast turns off fsync (tests only).\n";

int crier_cmd_cluster(int argc, char **argv)
{
    crier_pg_cluster_options opts = {0};
    const char *action = argc > 1 ? argv[1] : NULL;
    const char *dir = NULL;
    char conninfo[2048], err[4096];

    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--fast"))
            opts.fast = true;
        else if (!strcmp(argv[i], "--help"))
            action = "--help";
        else if (argv[i][0] == '-') {
            static const struct option options[] = {
                {"fast", no_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
            crier_cli_unknown_option("cluster", argv[i], options);
            return 2;
        } else if (!dir)
            dir = argv[i];
        else {
            crier_cli_error("cluster", "unexpected argument '%s' (see crier cluster --help)", argv[i]);
            return 2;
        }
    }
    if (!action || !strcmp(action, "--help") || !strcmp(action, "-h")) {
        fputs(cluster_help, action ? stdout : stderr);
        return action ? 0 : 2;
    }
    if (!dir) {
        crier_cli_error("cluster", "%s needs the cluster directory (see crier cluster --help)", action);
        return 2;
    }
    if (!strcmp(action, "start")) {
        if (crier_pg_cluster_start(dir, &opts, conninfo, sizeof conninfo, err, sizeof err) < 0) {
            crier_cli_error("cluster", "%s", err);
            return 1;
        }
        printf("%s\n", conninfo);
        return 0;
    }
    if (!strcmp(action, "stop")) {
        if (crier_pg_cluster_stop(dir, err, sizeof err) < 0) {
            crier_cli_error("cluster", "%s", err);
            return 1;
        }
        return 0;
    }
    if (!strcmp(action, "url")) {
        if (crier_pg_cluster_conninfo(dir, conninfo, sizeof conninfo, err, sizeof err) < 0) {
            crier_cli_error("cluster", "%s", err);
            return 1;
        }
        printf("%s\n", conninfo);
        return 0;
    }
    crier_cli_error("cluster", "unknown action '%s': use start, stop or url", action);
    return 2;
}
