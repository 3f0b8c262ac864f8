/* cmd_serve.c — `crier serve`: the daemon (fan-out and delivery workers) on the
 * configured database or the embedded default. */
#include "cli.h"
#include "engine.h"
#include "log.h"
#include "migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char serve_help[] =
    "usage: crier serve [options]\n"
    "\n"
    "Runs the engine: claims events, runs the rules, fans out notifications and\n"
    "delivers them. With no database configured it starts the embedded PostgreSQL\n"
    "cluster (and stops it on exit) and applies pending migrations.\n"
    "SIGTERM/SIGINT stop gracefully; SIGHUP reloads the rules (a broken version is\n"
    "rejected and the running one kept).\n"
    "\n"
    "options:\n" CLI_COMMON_HELP
    "  --batch-size N         events per fan-out transaction (default 500)\n"
    "  --delivery-batch N     deliveries per claim (default 200)\n"
    "  --max-inflight N       concurrent sends (default 256)\n"
    "  --lease SECONDS        delivery lease (default 60)\n"
    "  --poll SECONDS         fallback poll interval (default 1)\n"
    "  --timeout-ms N         webhook total timeout (default 15000)\n"
    "  --exit-when-idle       exit once no event or delivery is due\n"
    "  --no-migrate           do not apply pending migrations at start\n";

typedef struct {
    crier_engine_config cfg;
    bool migrate;
    int timeout_ms;
} serve_args;

static int serve_option(void *ud, int opt, const char *arg)
{
    serve_args *a = ud;
    char *end;

    switch (opt) {
    case 'b':
        return crier_cli_positive_int("serve", "batch-size", arg, 100000, &a->cfg.fanout.batch_size);
    case 'd':
        return crier_cli_positive_int("serve", "delivery-batch", arg, 100000, &a->cfg.delivery.batch_size);
    case 'm':
        if (crier_cli_positive_int("serve", "max-inflight", arg, 100000, &a->cfg.delivery.max_inflight) < 0)
            return -1;
        a->cfg.webhook.max_inflight = a->cfg.delivery.max_inflight;
        return 0;
    case 'l':
        return crier_cli_positive_int("serve", "lease", arg, 86400, &a->cfg.delivery.lease_seconds);
    case 'p':
        a->cfg.poll_interval = strtod(arg, &end);
        if (*end || a->cfg.poll_interval <= 0) {
            crier_cli_error("serve", "--poll expects a positive number of seconds, got '%s'", arg);
            return -1;
        }
        return 0;
    case 't':
        return crier_cli_positive_int("serve", "timeout-ms", arg, 3600000, &a->timeout_ms);
    case 'x':
        a->cfg.exit_when_idle = true;
        return 0;
    case 'n':
        a->migrate = false;
        return 0;
    }
    return -1;
}

int crier_cmd_serve(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"batch-size", required_argument, NULL, 'b'},
                                            {"delivery-batch", required_argument, NULL, 'd'},
                                            {"max-inflight", required_argument, NULL, 'm'},
                                            {"lease", required_argument, NULL, 'l'},
                                            {"poll", required_argument, NULL, 'p'},
                                            {"timeout-ms", required_argument, NULL, 't'},
                                            {"exit-when-idle", no_argument, NULL, 'x'},
                                            {"no-migrate", no_argument, NULL, 'n'},
                                            {NULL, 0, NULL, 0}};
    crier_cli cli;
    serve_args a;
    crier_engine_config *cfg = &a.cfg;
    crier_database db;
    char err[16384];
    int rc = 1;

    crier_cli_init(&cli);
    memset(&a, 0, sizeof a);
    a.migrate = true;
    a.timeout_ms = 15000;
    cfg->poll_interval = 1.0;
    cfg->shutdown_deadline = 10.0;
    cfg->handle_signals = true;
    if (crier_cli_parse(&cli, serve_help, argc, argv, options, serve_option, &a, &rc))
        goto out;
    rc = 2;
    if (optind < argc) {
        crier_cli_error("serve", "unexpected argument '%s' (see crier serve --help)", argv[optind]);
        goto out;
    }
    rc = 1;
    cfg->webhook.total_timeout_ms = a.timeout_ms;
    if (crier_database_open(cli.database, cli.data_dir, false, &db, err, sizeof err) < 0) {
        crier_cli_error("serve", "%s", err);
        goto out;
    }
    if (a.migrate && crier_migrate_run(db.conninfo, stderr, err, sizeof err) < 0) {
        crier_cli_error("serve", "%s", err);
        crier_database_close(&db);
        goto out;
    }
    cfg->conninfo = db.conninfo;
    cfg->lua_dir = cli.lua_dir;
    cfg->rules_dir = cli.rules_dir;
    cfg->settings = cli.settings;
    cfg->n_settings = cli.n_settings;
    if (crier_engine_run(cfg, NULL, err, sizeof err) < 0)
        crier_cli_error("serve", "%s", err);
    else
        rc = 0;
    crier_database_close(&db);
out:
    crier_cli_free(&cli);
    return rc;
}
