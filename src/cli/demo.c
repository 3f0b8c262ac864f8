/* demo.c — `crier demo`: the billing story end to end on the embedded default.
 *
 * A job runner emits a batch of invoice.created events; its first attempt times
 * out half way (half the events were committed), so it retries the whole batch
 * — with new dedupe keys, the classic mistake. The engine fans out and delivers
 * to a local webhook receiver; the demo then prints, per person and invoice,
 * how many alerts arrived. The unique notification key makes it one each. */
#include "cli.h"
#include "engine.h"
#include "target_guard.h"
#include "http_sink.h"
#include "log.h"
#include "migrate.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char demo_help[] =
    "usage: crier demo [--data-dir DIR]\n"
    "\n"
    "Runs the billing story on the embedded default and the bundled example rules\n"
    "(CRIER_DATABASE_URL and CRIER_RULES are ignored): starts the private\n"
    "PostgreSQL cluster (default ./.crier/pg), creates a fresh database\n"
    "crier_demo in it, migrates, starts a local webhook receiver, emits a\n"
    "batch of invoice.created events, then the job runner's retry of the whole batch\n"
    "after a timeout half way, runs the engine, and prints per person how many\n"
    "alerts arrived. Exit status 0 when every person got exactly one alert per\n"
    "invoice. Stops everything it started.\n";

typedef struct {
    const char *tenant, *invoice, *amount, *currency;
} demo_invoice;

static const demo_invoice demo_batch[] = {
    {"acme", "inv_1001", "1250", "EUR"},
    {"acme", "inv_1002", "98000", "EUR"},
    {"acme", "inv_1003", "4999", "USD"},
    {"globex", "inv_2001", "31000", "USD"},
};
#define DEMO_BATCH_LEN (sizeof demo_batch / sizeof demo_batch[0])

/* Emits events [from, to) of the batch for the given job-runner attempt. */
static int demo_emit(PGconn *conn, int attempt, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        const demo_invoice *inv = &demo_batch[i];
        char payload[256], dedupe[128];
        snprintf(payload, sizeof payload, "{\"invoice_id\": \"%s\", \"amount_cents\": %s, \"currency\": \"%s\"}",
                 inv->invoice, inv->amount, inv->currency);
        /* The job runner keys its calls by attempt: a retry is not recognised as
         * the same event, so only the notification key stands between the
         * retry and a second alert. */
        snprintf(dedupe, sizeof dedupe, "billing-run-7/attempt-%d/%s", attempt, inv->invoice);
        const char *params[5] = {inv->tenant, "invoice.created", inv->invoice, payload, dedupe};
        PGresult *res = PQexecParams(conn, "SELECT crier.emit($1, $2, $3, $4::jsonb, $5)", 5, NULL, params, NULL,
                                     NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            crier_cli_error("demo", "emit failed: %s", PQresultErrorMessage(res));
            PQclear(res);
            return -1;
        }
        PQclear(res);
    }
    return 0;
}

/* Prints the alerts per person and invoice; returns 0 when each is exactly 1. */
static int demo_report(PGconn *conn, crier_http_sink *sink)
{
    size_t n_ids = 0;
    char **ids = crier_http_sink_ids(sink, &n_ids);
    int rc = 0;
    PGresult *res = PQexec(conn, "SELECT n.tenant, n.recipient_id, n.entity_id, d.message_id"
                                 " FROM crier.notifications n JOIN crier.deliveries d ON d.notification_id = n.id"
                                 " ORDER BY n.tenant, n.recipient_id, n.entity_id");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        crier_cli_error("demo", "%s", PQresultErrorMessage(res));
        rc = -1;
        goto out;
    }
    printf("\nalerts that arrived at the webhook receiver, per person and invoice:\n");
    char last_person[256] = "", person[256] = "";
    for (int i = 0; i < PQntuples(res); i++) {
        const char *msg = PQgetvalue(res, i, 3);
        size_t count = 0;
        for (size_t j = 0; j < n_ids; j++)
            count += strcmp(ids[j], msg) == 0;
        snprintf(person, sizeof person, "%s/%s", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
        if (strcmp(person, last_person) != 0) {
            printf("%s  %-14s", i ? "\n" : "", person);
            snprintf(last_person, sizeof last_person, "%s", person);
        }
        printf("  %s: %zu", PQgetvalue(res, i, 2), count);
        if (count != 1)
            rc = -1;
    }
    printf("\n\nrequests received: %zu, distinct notifications: %d\n", n_ids, PQntuples(res));
    if ((size_t)PQntuples(res) != n_ids)
        rc = -1;
out:
    PQclear(res);
    for (size_t j = 0; j < n_ids; j++)
        free(ids[j]);
    free(ids);
    return rc;
}

int crier_cmd_demo(int argc, char **argv)
{
    crier_cli cli;
    crier_database db = {0};
    crier_http_sink *sink = NULL;
    PGconn *conn = NULL;
    char err[16384], url[256], conninfo[2400], rules_conninfo[2400], setting[300];
    crier_engine_stats stats[2];
    int rc = 1;

    crier_cli_init(&cli);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            fputs(demo_help, stdout);
            crier_cli_print_paths(stdout, &cli);
            crier_cli_free(&cli);
            return 0;
        } else if (!strcmp(argv[i], "--data-dir") && i + 1 < argc) {
            cli.data_dir = argv[++i];
        } else {
            static const struct option options[] = {
                {"data-dir", required_argument, NULL, 'd'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
            if (argv[i][0] == '-')
                crier_cli_unknown_option("demo", argv[i], options);
            else
                crier_cli_error("demo", "unexpected argument '%s' (see crier demo --help)", argv[i]);
            crier_cli_free(&cli);
            return 2;
        }
    }
    /* the billing story runs the bundled example rules, whatever CRIER_RULES says */
    cli.rules_dir = crier_cli_bundled_rules();
    if (crier_cli_require_lua_dir("demo", &cli) < 0)
        goto out;
    unsetenv("CRIER_DATABASE_URL");
    printf("== crier demo: the billing story ==\n");
    if (crier_database_open(NULL, cli.data_dir, false, &db, err, sizeof err) < 0) {
        crier_cli_error("demo", "%s", err);
        goto out;
    }
    printf("embedded PostgreSQL: %s\n", db.data_dir);
    printf("rules: %s (Lua library %s)\n", cli.rules_dir, cli.lua_dir);
    /* a fresh database owned by the service role: the demo, like serve, never works as the superuser */
    if (crier_database_create(&db, "crier_demo", true, conninfo, sizeof conninfo, err, sizeof err) < 0) {
        crier_cli_error("demo", "%s", err);
        goto out;
    }
    if (crier_migrate_run(conninfo, stdout, err, sizeof err) < 0) {
        crier_cli_error("demo", "%s", err);
        goto out;
    }
    conn = PQconnectdb(conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        crier_cli_error("demo", "cannot connect: %s", PQerrorMessage(conn));
        goto out;
    }
    sink = crier_http_sink_start(err, sizeof err);
    if (!sink) {
        crier_cli_error("demo", "%s", err);
        goto out;
    }
    snprintf(url, sizeof url, "http://127.0.0.1:%u/hooks/billing", crier_http_sink_port(sink));
    snprintf(setting, sizeof setting, "billing_webhook_url=%s", url);
    crier_cli_set(&cli, setting);
    printf("webhook receiver: %s\n", url);

    if (crier_database_conninfo_as(conninfo, CRIER_RULES_ROLE, NULL, rules_conninfo, sizeof rules_conninfo, err,
                                   sizeof err) < 0) {
        crier_cli_error("demo", "%s", err);
        goto out;
    }
    crier_engine_config cfg = {
        .conninfo = conninfo,
        .rules_conninfo = rules_conninfo,
        .lua_dir = cli.lua_dir,
        .rules_dir = cli.rules_dir,
        .settings = cli.settings,
        .n_settings = cli.n_settings,
        .poll_interval = 0.2,
        .shutdown_deadline = 10,
        .exit_when_idle = true,
        .handle_signals = true,
        /* the demo's receiver is on loopback, which webhooks refuse by default */
        .webhook = {.allow_targets = CRIER_TARGET_ALLOW_LOOPBACK},
    };

    printf("\njob runner, attempt 1: emitting %zu invoices... timed out after %zu\n", DEMO_BATCH_LEN,
           DEMO_BATCH_LEN / 2);
    if (demo_emit(conn, 1, 0, DEMO_BATCH_LEN / 2) < 0)
        goto out;
    if (crier_engine_run(&cfg, &stats[0], err, sizeof err) < 0) {
        crier_cli_error("demo", "%s", err);
        goto out;
    }
    printf("engine: %llu events fanned out, %llu notifications, %llu alerts delivered\n",
           (unsigned long long)stats[0].fanout.events_done,
           (unsigned long long)stats[0].fanout.notifications_created,
           (unsigned long long)stats[0].delivery.delivered);

    printf("\njob runner, attempt 2: retrying the whole batch of %zu invoices\n", DEMO_BATCH_LEN);
    if (demo_emit(conn, 2, 0, DEMO_BATCH_LEN) < 0)
        goto out;
    if (crier_engine_run(&cfg, &stats[1], err, sizeof err) < 0) {
        crier_cli_error("demo", "%s", err);
        goto out;
    }
    printf("engine: %llu events fanned out, %llu notifications new, %llu duplicates refused by the "
           "unique key, %llu alerts delivered\n",
           (unsigned long long)stats[1].fanout.events_done,
           (unsigned long long)stats[1].fanout.notifications_created,
           (unsigned long long)stats[1].fanout.notifications_duplicate,
           (unsigned long long)stats[1].delivery.delivered);

    if (demo_report(conn, sink) == 0) {
        printf("result: one alert per person per invoice, despite the retry\n");
        rc = 0;
    } else {
        printf("result: FAILED: some person did not get exactly one alert per invoice\n");
    }
out:
    crier_http_sink_stop(sink);
    if (conn)
        PQfinish(conn);
    crier_database_close(&db);
    crier_cli_free(&cli);
    return rc;
}
