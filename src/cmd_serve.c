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

/* Parses a positive integer option or prints an error. */
static int serve_int(const char *name, const char *arg, int *out)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (*arg == '\0' || *end != '\0' || v <= 0 || v > 1000000) {
        crier_cli_error("serve", "--%s expects a positive integer, got '%s'", name, arg);
        return -1;
    }
    *out = (int)v;
    return 0;
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
    crier_engine_config cfg;
    crier_database db;
    char err[16384];
    bool migrate = true;
    int opt, rc = 1, timeout_ms = 15000;

    crier_cli_init(&cli);
    memset(&cfg, 0, sizeof cfg);
    cfg.poll_interval = 1.0;
    cfg.shutdown_deadline = 10.0;
    cfg.handle_signals = true;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        int r = crier_cli_option(&cli, opt, optarg);
        if (r < 0)
            goto out;
        if (r > 0)
            continue;
        switch (opt) {
        case 'b':
            if (serve_int("batch-size", optarg, &cfg.fanout.batch_size) < 0)
                goto out;
            break;
        case 'd':
            if (serve_int("delivery-batch", optarg, &cfg.delivery.batch_size) < 0)
                goto out;
            break;
        case 'm':
            if (serve_int("max-inflight", optarg, &cfg.delivery.max_inflight) < 0)
                goto out;
            cfg.webhook.max_inflight = cfg.delivery.max_inflight;
            break;
        case 'l':
            if (serve_int("lease", optarg, &cfg.delivery.lease_seconds) < 0)
                goto out;
            break;
        case 'p': {
            char *end;
            cfg.poll_interval = strtod(optarg, &end);
            if (*end || cfg.poll_interval <= 0) {
                crier_cli_error("serve", "--poll expects a positive number of seconds, got '%s'", optarg);
                goto out;
            }
            break;
        }
        case 't':
            if (serve_int("timeout-ms", optarg, &timeout_ms) < 0)
                goto out;
            break;
        case 'x':
            cfg.exit_when_idle = true;
            break;
        case 'n':
            migrate = false;
            break;
        default:
            fputs(serve_help, stderr);
            goto out;
        }
    }
    if (cli.help) {
        fputs(serve_help, stdout);
        rc = 0;
        goto out;
    }
    if (optind < argc) {
        crier_cli_error("serve", "unexpected argument '%s' (see crier serve --help)", argv[optind]);
        goto out;
    }
    cfg.webhook.total_timeout_ms = timeout_ms;
    if (crier_database_open(cli.database, cli.data_dir, false, &db, err, sizeof err) < 0) {
        crier_cli_error("serve", "%s", err);
        goto out;
    }
    if (migrate && crier_migrate_run(db.conninfo, stderr, err, sizeof err) < 0) {
        crier_cli_error("serve", "%s", err);
        crier_database_close(&db);
        goto out;
    }
    cfg.conninfo = db.conninfo;
    cfg.lua_dir = cli.lua_dir;
    cfg.rules_dir = cli.rules_dir;
    cfg.settings = cli.settings;
    cfg.n_settings = cli.n_settings;
    if (crier_engine_run(&cfg, NULL, err, sizeof err) < 0)
        crier_cli_error("serve", "%s", err);
    else
        rc = 0;
    crier_database_close(&db);
out:
    crier_cli_free(&cli);
    return rc;
}
