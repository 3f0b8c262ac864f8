/* cmd_dead.c — `crier dead list` and `crier dead replay`: the dead letters —
 * deliveries that failed permanently or spent their retry schedule, and events
 * whose rules failed until they were quarantined — listed with their last
 * error, and replayed: a replayed delivery gets a fresh retry schedule under
 * the same notification key (so receivers dedupe), a replayed event is fanned
 * out again (existing notifications are not created twice). Only dead rows are
 * touched, so replaying twice, or replaying something that meanwhile
 * succeeded, sends nothing twice. */
#include "cli.h"
#include "database.h"
#include "time_arg.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char dead_help[] =
    "usage: crier dead list [filters] [--limit N] [--json]\n"
    "       crier dead replay [filters] [--dry-run]\n"
    "\n"
    "Dead letters: deliveries that failed permanently or spent their retry schedule,\n"
    "and events whose rules failed until they were quarantined. list shows them,\n"
    "newest first, with the last error; replay makes them due again: a delivery gets\n"
    "a fresh retry schedule under the same notification key (webhook-id, Message-ID,\n"
    "Kafka key), an event is fanned out again (notifications that exist are not\n"
    "created twice), and a disabled endpoint of a replayed delivery is enabled.\n"
    "Replaying twice, or something that meanwhile succeeded, sends nothing twice.\n"
    "replay takes what was dead when it started (without --until): a letter that\n"
    "dies again while it runs waits for the next replay.\n"
    "\n"
    "filters:\n"
    "  --tenant T         only this tenant\n"
    "  --type TYPE        only this event type\n"
    "  --channel C        only deliveries on this channel (webhook, email, kafka)\n"
    "  --since TIME       died at or after TIME: a timestamp (2026-12-01 10:00Z) or a\n"
    "                     duration ago (90s, 30m, 2h, 7d)\n"
    "  --until TIME       died before TIME (same forms)\n"
    "  --deliveries       only deliveries;  --events: only events\n"
    "  --id N             only the delivery with id N\n"
    "  --event N          only the event with id N\n"
    "options:\n"
    "  --limit N          list at most N (default 100)\n"
    "  --json             list as one JSON object per line\n"
    "  --dry-run          replay: count what would be replayed, change nothing\n" CLI_COMMON_HELP;

enum { F_TENANT, F_TYPE, F_CHANNEL, F_SINCE, F_UNTIL, F_KIND, F_ID, F_EVENT, N_FILTERS };

typedef struct {
    const char *filter[N_FILTERS];
    char since[64], until[64];
    int limit;
    bool json, dry_run;
} dead_args;

/* The dead letters (crier.dead_letters, sql/functions/dead_letters.sql: the same definition as the
 * HTTP API's), filtered by $1..$8 (tenant, type, channel, since, until, kind,
 * delivery id, event id; NULL: any). */
#define DEAD_ROWS                                                                                   \
    "SELECT x.kind, x.id, x.tenant, x.event_type, x.entity_id, x.recipient, x.channel, x.target,"  \
    "       x.attempts, x.died_at, x.last_status, x.last_error"                                    \
    " FROM crier.dead_letters($1, $2, $3, $4::timestamptz, $5::timestamptz, $6, $7::bigint,"       \
    "                         $8::bigint) AS x"

static const char SQL_LIST[] = DEAD_ROWS " ORDER BY x.died_at DESC NULLS LAST, x.id DESC LIMIT $9";

static const char SQL_LIST_JSON[] =
    "SELECT row_to_json(y) FROM (" DEAD_ROWS " ORDER BY x.died_at DESC NULLS LAST, x.id DESC LIMIT $9) AS y";

static const char SQL_COUNT[] =
    "SELECT count(*) FILTER (WHERE kind = 'delivery'), count(*) FILTER (WHERE kind = 'event')"
    " FROM (" DEAD_ROWS ") AS y";

/* One chunk (crier.replay_dead): deliveries due now with a fresh schedule,
 * their disabled endpoints enabled, then events fanned out again. */
static const char SQL_REPLAY[] =
    "SELECT r.deliveries, r.events, r.endpoints_enabled"
    " FROM crier.replay_dead($1, $2, $3, $4::timestamptz, $5::timestamptz, $6, $7::bigint, $8::bigint,"
    "                        $9::int) AS r";

#define DEAD_REPLAY_CHUNK "500"

static int dead_option(void *ud, int opt, const char *arg)
{
    dead_args *a = ud;
    char *end;

    switch (opt) {
    case 't': a->filter[F_TENANT] = arg; return 0;
    case 'y': a->filter[F_TYPE] = arg; return 0;
    case 'c':
        if (strcmp(arg, "webhook") && strcmp(arg, "email") && strcmp(arg, "kafka")) {
            crier_cli_error("dead", "--channel expects webhook, email or kafka, got '%s'", arg);
            return -1;
        }
        a->filter[F_CHANNEL] = arg;
        return 0;
    case 's': a->filter[F_SINCE] = crier_time_arg(arg, a->since, sizeof a->since); return 0;
    case 'u': a->filter[F_UNTIL] = crier_time_arg(arg, a->until, sizeof a->until); return 0;
    case 'D': a->filter[F_KIND] = "delivery"; return 0;
    case 'E': a->filter[F_KIND] = "event"; return 0;
    case 'i':
    case 'e':
        strtoll(arg, &end, 10);
        if (!*arg || *end) {
            crier_cli_error("dead", "--%s expects a numeric id, got '%s'", opt == 'i' ? "id" : "event", arg);
            return -1;
        }
        a->filter[opt == 'i' ? F_ID : F_EVENT] = arg;
        return 0;
    case 'l': return crier_cli_positive_int("dead", "limit", arg, 1000000, &a->limit);
    case 'j': a->json = true; return 0;
    case 'n': a->dry_run = true; return 0;
    }
    return -1;
}

static PGresult *dead_exec(PGconn *conn, const char *sql, const dead_args *a, const char *limit)
{
    const char *values[N_FILTERS + 1];
    memcpy(values, a->filter, sizeof a->filter);
    values[N_FILTERS] = limit;
    PGresult *res = PQexecParams(conn, sql, limit ? N_FILTERS + 1 : N_FILTERS, NULL, values, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *msg = PQresultErrorMessage(res);
        if (strstr(msg, "timestamp"))
            crier_cli_error("dead", "%s--since and --until take a timestamp such as '2026-12-01 10:00Z' or a "
                                    "duration ago such as 2h", msg);
        else
            crier_cli_error("dead", "%s(run crier migrate first?)", msg);
        PQclear(res);
        return NULL;
    }
    return res;
}

/* Prints text whole (a Lua error carries its traceback), each later line
 * indented so that the next dead letter's header stands out. */
static void print_indented(const char *text, const char *indent)
{
    for (const char *p = text; *p; p++) {
        putchar(*p);
        if (*p == '\n' && p[1])
            fputs(indent, stdout);
    }
    putchar('\n');
}

static int dead_list(PGconn *conn, const dead_args *a)
{
    char limit[24];
    snprintf(limit, sizeof limit, "%d", a->limit);
    PGresult *res = dead_exec(conn, a->json ? SQL_LIST_JSON : SQL_LIST, a, limit);
    if (!res)
        return 1;
    int n = PQntuples(res);
    for (int i = 0; i < n; i++) {
        if (a->json) {
            printf("%s\n", PQgetvalue(res, i, 0));
            continue;
        }
        /* kind id tenant type entity recipient channel target attempts died_at status error */
        printf("%s %s  tenant=%s type=%s entity=%s", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
               PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 4));
        if (!PQgetisnull(res, i, 5))
            printf(" recipient=%s channel=%s target=%s", PQgetvalue(res, i, 5), PQgetvalue(res, i, 6),
                   PQgetvalue(res, i, 7));
        printf("\n    attempts=%s died=%s", PQgetvalue(res, i, 8),
               PQgetisnull(res, i, 9) ? "-" : PQgetvalue(res, i, 9));
        if (!PQgetisnull(res, i, 10))
            printf(" status=%s", PQgetvalue(res, i, 10));
        printf("\n    error: ");
        print_indented(PQgetisnull(res, i, 11) ? "-" : PQgetvalue(res, i, 11), "      ");
    }
    if (!a->json)
        fprintf(stderr, "%d dead letter%s shown%s\n", n, n == 1 ? "" : "s",
                n == a->limit ? " (more may exist: raise --limit or narrow the filters)" : "");
    PQclear(res);
    return 0;
}

static void dead_progress(bool tty, const char *what, long long done, long long total)
{
    if (!tty || total <= 0)
        return;
    int width = 30, filled = (int)(width * done / total);
    fprintf(stderr, "\rreplaying %s [%.*s%*s] %lld/%lld", what, filled, "##############################",
            width - filled, "", done, total);
    if (done >= total)
        fputc('\n', stderr);
    fflush(stderr);
}

static int dead_replay(PGconn *conn, const dead_args *given)
{
    /* Only what was dead when the command started: replaying runs in chunks,
     * and a letter that dies again meanwhile (a rule that still fails) must
     * not be replayed a second time by a later chunk. */
    dead_args args = *given;
    const dead_args *a = &args;
    PGresult *res;
    if (!args.filter[F_UNTIL]) {
        res = PQexec(conn, "SELECT now()::text");
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            crier_cli_error("dead", "cannot read the database's clock: %s", PQresultErrorMessage(res));
            PQclear(res);
            return 1;
        }
        snprintf(args.until, sizeof args.until, "%s", PQgetvalue(res, 0, 0));
        args.filter[F_UNTIL] = args.until;
        PQclear(res);
    }
    if (args.filter[F_SINCE])
        args.filter[F_SINCE] = args.since;
    res = dead_exec(conn, SQL_COUNT, a, NULL);
    if (!res)
        return 1;
    long long deliveries = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    long long events = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    PQclear(res);
    if (a->dry_run) {
        printf("would replay %lld deliveries and %lld events (dry run: nothing changed)\n", deliveries, events);
        return 0;
    }
    if (deliveries + events == 0) {
        printf("nothing to replay: no dead letter matches (crier dead list shows them)\n");
        return 0;
    }
    /* in chunks until none is left (deliveries first, then events) */
    bool tty = isatty(STDERR_FILENO);
    long long total = deliveries + events, endpoints = 0, d = 0, e = 0;
    dead_progress(tty, "dead letters", 0, total);
    for (;;) {
        res = dead_exec(conn, SQL_REPLAY, a, DEAD_REPLAY_CHUNK);
        if (!res)
            return 1;
        long long nd = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        long long ne = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
        endpoints += strtoll(PQgetvalue(res, 0, 2), NULL, 10);
        PQclear(res);
        if (nd + ne == 0)
            break;
        d += nd;
        e += ne;
        dead_progress(tty, "dead letters", d + e < total ? d + e : total, total);
    }
    if (tty && d + e < total)
        dead_progress(tty, "dead letters", total, total);
    printf("replayed %lld deliveries and %lld events: due now for crier serve", d, e);
    if (endpoints > 0)
        printf("; %lld disabled endpoint%s enabled", endpoints, endpoints == 1 ? "" : "s");
    printf("\n");
    return 0;
}

int crier_cmd_dead(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"tenant", required_argument, NULL, 't'},
                                            {"type", required_argument, NULL, 'y'},
                                            {"channel", required_argument, NULL, 'c'},
                                            {"since", required_argument, NULL, 's'},
                                            {"until", required_argument, NULL, 'u'},
                                            {"deliveries", no_argument, NULL, 'D'},
                                            {"events", no_argument, NULL, 'E'},
                                            {"id", required_argument, NULL, 'i'},
                                            {"event", required_argument, NULL, 'e'},
                                            {"limit", required_argument, NULL, 'l'},
                                            {"json", no_argument, NULL, 'j'},
                                            {"dry-run", no_argument, NULL, 'n'},
                                            {NULL, 0, NULL, 0}};
    crier_cli cli;
    dead_args a = {.limit = 100};
    crier_database db;
    int rc = 2;
    const char *action = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;

    crier_cli_init(&cli);
    if (crier_cli_parse(&cli, dead_help, action ? argc - 1 : argc, action ? argv + 1 : argv, options, dead_option,
                        &a, &rc))
        goto out;
    rc = 2;
    if (!action || (strcmp(action, "list") && strcmp(action, "replay"))) {
        crier_cli_error("dead", "%s: use crier dead list or crier dead replay (see crier dead --help)",
                        action ? "unknown action" : "missing action");
        goto out;
    }
    if (optind < argc - 1) {
        crier_cli_error("dead", "unexpected argument '%s' (see crier dead --help)", argv[optind + 1]);
        goto out;
    }
    rc = 1;
    PGconn *conn = crier_cli_connect("dead", &cli, &db);
    if (!conn)
        goto out;
    rc = !strcmp(action, "list") ? dead_list(conn, &a) : dead_replay(conn, &a);
    PQfinish(conn);
    crier_database_close(&db);
out:
    crier_cli_free(&cli);
    return rc;
}
