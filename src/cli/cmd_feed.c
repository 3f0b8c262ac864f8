/* cmd_feed.c — `crier feed`: a person's in-app feed from the command line,
 * through the same SQL functions as the HTTP API (crier.feed, feed_counts,
 * feed_mark, feed_mark_all, join/leave_audience). For operators and tests; a
 * browser inbox uses the HTTP API (docs/API.md). */
#include "cli.h"
#include "database.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char feed_help[] =
    "usage: crier feed list   --tenant T --user U [--limit N] [--before ID] [--archived]\n"
    "       crier feed counts --tenant T --user U\n"
    "       crier feed read-all|seen-all --tenant T --user U [--upto ID]\n"
    "       crier feed mark ID read|unread|seen|unseen|archive|unarchive --tenant T --user U\n"
    "       crier feed join|leave --tenant T --user U --audience A\n"
    "\n"
    "A person's feed: their own items (rules' feed channel) merged with their\n"
    "audiences' items (rules in mode \"read\"), newest first, with read/seen/archived\n"
    "states. read-all is exact: it stores this moment's database snapshot, so an\n"
    "item whose transaction had not committed yet stays unread. --upto limits it to\n"
    "items at or below that position (the id list shows).\n"
    "\noptions:\n"
    "  --tenant T --user U    whose feed (required)\n"
    "  --limit N              items per page (default 20, at most 100)\n"
    "  --before ID            the page below this position (keyset)\n"
    "  --archived             include archived items\n"
    "  --upto ID              read-all/seen-all up to this position\n"
    "  --audience A           join/leave: the audience, e.g. team:core\n" CLI_COMMON_HELP;

typedef struct {
    const char *tenant, *user, *before, *upto, *audience;
    int limit;
    bool archived;
} feed_args;

static int feed_option(void *ud, int opt, const char *arg)
{
    feed_args *a = ud;
    char *end;
    switch (opt) {
    case 't': a->tenant = arg; return 0;
    case 'u': a->user = arg; return 0;
    case 'a': a->audience = arg; return 0;
    case 'A': a->archived = true; return 0;
    case 'l': return crier_cli_positive_int("feed", "limit", arg, 100, &a->limit);
    case 'b':
    case 'p':
        strtoll(arg, &end, 10);
        if (!*arg || *end) {
            crier_cli_error("feed", "--%s expects a position (a number from crier feed list), got '%s'",
                            opt == 'b' ? "before" : "upto", arg);
            return -1;
        }
        *(opt == 'b' ? &a->before : &a->upto) = arg;
        return 0;
    }
    return -1;
}

static int feed_exec(PGconn *conn, const char *sql, int n, const char *const *values, PGresult **out)
{
    PGresult *res = PQexecParams(conn, sql, n, NULL, values, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        crier_cli_error("feed", "%s(run crier migrate first?)", PQresultErrorMessage(res));
        PQclear(res);
        return 1;
    }
    *out = res;
    return 0;
}

static int feed_run(PGconn *conn, const char *action, const char *item, const char *what, const feed_args *a)
{
    PGresult *res = NULL;
    char limit[16];
    int rc;
    snprintf(limit, sizeof limit, "%d", a->limit);

    if (!strcmp(action, "list")) {
        const char *v[5] = {a->tenant, a->user, a->before, limit, a->archived ? "t" : "f"};
        rc = feed_exec(conn,
                       "SELECT id, kind, event_type, created_at, read, seen, archived, content"
                       " FROM crier.feed($1, $2, $3::bigint, $4::int, $5::bool)",
                       5, v, &res);
        if (rc)
            return rc;
        for (int i = 0; i < PQntuples(res); i++)
            printf("%s %s %s %s read=%s seen=%s archived=%s %s\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                   PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 4), PQgetvalue(res, i, 5),
                   PQgetvalue(res, i, 6), PQgetvalue(res, i, 7));
        if (PQntuples(res) == a->limit)
            fprintf(stderr, "more: crier feed list ... --before %s\n", PQgetvalue(res, PQntuples(res) - 1, 0));
    } else if (!strcmp(action, "counts")) {
        const char *v[2] = {a->tenant, a->user};
        if ((rc = feed_exec(conn, "SELECT unread, unseen FROM crier.feed_counts($1, $2)", 2, v, &res)))
            return rc;
        printf("unread: %s\nunseen: %s\n", PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
    } else if (!strcmp(action, "read-all") || !strcmp(action, "seen-all")) {
        const char *v[4] = {a->tenant, a->user, action[0] == 'r' ? "read" : "seen", a->upto};
        if ((rc = feed_exec(conn, "SELECT crier.feed_mark_all($1, $2, $3, $4::bigint)", 4, v, &res)))
            return rc;
        printf("marked all %s%s%s\n", v[2], a->upto ? " up to " : "", a->upto ? a->upto : "");
    } else if (!strcmp(action, "mark")) {
        static const char *const verbs[][3] = {{"read", "read", "t"},       {"unread", "read", "f"},
                                               {"seen", "seen", "t"},       {"unseen", "seen", "f"},
                                               {"archive", "archived", "t"}, {"unarchive", "archived", "f"}};
        const char *const *verb = NULL;
        char *end;
        for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
            if (what && !strcmp(what, verbs[i][0]))
                verb = verbs[i];
        strtoll(item ? item : "", &end, 10);
        if (!item || !*item || *end || !verb) {
            crier_cli_error("feed", "usage: crier feed mark ID read|unread|seen|unseen|archive|unarchive");
            return 2;
        }
        const char *v[5] = {a->tenant, a->user, item, verb[1], verb[2]};
        if ((rc = feed_exec(conn, "SELECT crier.feed_mark($1, $2, $3::bigint, $4, $5::bool)", 5, v, &res)))
            return rc;
        if (PQgetvalue(res, 0, 0)[0] != 't') {
            crier_cli_error("feed", "%s has no item %s in tenant %s: nothing changed", a->user, item, a->tenant);
            PQclear(res);
            return 1;
        }
        printf("item %s: %s\n", item, what);
    } else {
        const char *v[3] = {a->tenant, a->audience, a->user};
        if (!a->audience) {
            crier_cli_error("feed", "%s needs --audience", action);
            return 2;
        }
        if ((rc = feed_exec(conn,
                            !strcmp(action, "join") ? "SELECT crier.join_audience($1, $2, $3)"
                                                    : "SELECT crier.leave_audience($1, $2, $3)",
                            3, v, &res)))
            return rc;
        printf("%s %s %s\n", a->user, !strcmp(action, "join") ? "joined" : "left", a->audience);
    }
    PQclear(res);
    return 0;
}

int crier_cmd_feed(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"tenant", required_argument, NULL, 't'},
                                            {"user", required_argument, NULL, 'u'},
                                            {"limit", required_argument, NULL, 'l'},
                                            {"before", required_argument, NULL, 'b'},
                                            {"archived", no_argument, NULL, 'A'},
                                            {"upto", required_argument, NULL, 'p'},
                                            {"audience", required_argument, NULL, 'a'},
                                            {NULL, 0, NULL, 0}};
    static const char *const actions[] = {"list", "counts", "read-all", "seen-all", "mark", "join", "leave"};
    crier_cli cli;
    feed_args a = {.limit = 20};
    crier_database db;
    int rc = 2;
    const char *action = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;
    bool known = false;

    crier_cli_init(&cli);
    if (crier_cli_parse(&cli, feed_help, action ? argc - 1 : argc, action ? argv + 1 : argv, options, feed_option,
                        &a, &rc))
        goto out;
    rc = 2;
    for (size_t i = 0; action && i < sizeof actions / sizeof actions[0]; i++)
        known = known || !strcmp(action, actions[i]);
    if (!known) {
        crier_cli_error("feed", "%s: use list, counts, read-all, seen-all, mark, join or leave (see crier feed --help)",
                        action ? "unknown action" : "missing action");
        goto out;
    }
    if (!a.tenant || !a.user) {
        crier_cli_error("feed", "--tenant and --user are required (whose feed?)");
        goto out;
    }
    /* operands after the action (getopt ran on argv + 1) */
    const char *item = optind < argc - 1 ? argv[1 + optind] : NULL;
    const char *what = optind + 1 < argc - 1 ? argv[2 + optind] : NULL;
    if ((strcmp(action, "mark") && item) || (what && optind + 2 < argc - 1)) {
        crier_cli_error("feed", "unexpected argument '%s' (see crier feed --help)", item);
        goto out;
    }
    rc = 1;
    PGconn *conn = crier_cli_connect("feed", &cli, &db);
    if (!conn)
        goto out;
    rc = feed_run(conn, action, item, what, &a);
    PQfinish(conn);
    crier_database_close(&db);
out:
    crier_cli_free(&cli);
    return rc;
}
