/* main.c — the crier binary: dispatches to the subcommands. */
#include "bench.h"
#include "cli.h"
#include "log.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char main_help[] =
    "usage: crier COMMAND [options]   (crier COMMAND --help for each)\n"
    "       crier --version           the version, its schema and its Lua library\n"
    "\n"
    "crier is a notification engine: applications emit domain events, Lua rules\n"
    "decide who hears about them on which channels, and a C core fans them out and\n"
    "delivers them at least once, never twice to a person.\n"
    "\n"
    "commands:\n"
    "  serve     run the engine (fan-out and delivery workers; --http: the HTTP API)\n"
    "  emit      emit one event (prints its id)\n"
    "  migrate   apply pending schema migrations\n"
    "  check     load and validate the rules\n"
    "  try       run one event through the rules and print the plan (changes nothing)\n"
    "  status    outbox state: events, notifications, deliveries\n"
    "  demo      the billing story end to end on the embedded default\n"
    "  bench     benchmarks (bench fanout, deliver, feed, timers)\n"
    "  cluster   manage a private PostgreSQL cluster (start|stop|url DIR)\n"
    "  feed      a person's feed: list, counts, read-all, mark, join/leave audiences\n"
    "  dead      list / replay dead letters (failed deliveries, quarantined events)\n"
    "  keys      API keys of the HTTP API (create, list, revoke, rotate-secret)\n"
    "  token     sign a short-lived user token for a person's own feed\n"
    "\n"
    "environment: CRIER_DATABASE_URL (libpq connection string), CRIER_DATA_DIR,\n"
    "CRIER_RULES, CRIER_LUA_DIR, CRIER_SET_<NAME>=VALUE, CRIER_LOG=debug|info|warn|error\n"
    "(default: info for serve, warn for the other commands),\n"
    "CRIER_CONFIG (a Lua config file, as --config FILE: see examples/crier.conf.lua)\n";

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    crier_log_level log_level; /* the default; CRIER_LOG overrides it */
} command;

int main(int argc, char **argv)
{
    /* The daemon logs what it does (info); a command run by hand says only
     * what went wrong (warn), its result goes to stdout. */
    static const command commands[] = {
        {"serve", crier_cmd_serve, CRIER_LOG_INFO},     {"emit", crier_cmd_emit, CRIER_LOG_WARN},
        {"migrate", crier_cmd_migrate, CRIER_LOG_WARN}, {"check", crier_cmd_check, CRIER_LOG_WARN},
        {"try", crier_cmd_try, CRIER_LOG_WARN},         {"status", crier_cmd_status, CRIER_LOG_WARN},
        {"demo", crier_cmd_demo, CRIER_LOG_WARN},       {"bench", crier_cmd_bench, CRIER_LOG_WARN},
        {"cluster", crier_cmd_cluster, CRIER_LOG_WARN}, {"dead", crier_cmd_dead, CRIER_LOG_WARN},
        {"feed", crier_cmd_feed, CRIER_LOG_WARN},       {"keys", crier_cmd_keys, CRIER_LOG_WARN},
        {"token", crier_cmd_token, CRIER_LOG_WARN},
    };
    int rc;

    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        crier_log_set_level(CRIER_LOG_WARN);
        crier_log_init_from_env();
        return crier_cmd_version(argc - 1, argv + 1);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        crier_log_set_level(commands[i].log_level);
        crier_log_init_from_env();
        signal(SIGPIPE, SIG_IGN);
        srandom((unsigned)time(NULL) ^ (unsigned)getpid());
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
            fprintf(stderr, "crier: cannot initialise libcurl\n");
            return 1;
        }
        rc = commands[i].run(argc - 1, argv + 1);
        curl_global_cleanup();
        return rc;
    }
    {
        const char *names[sizeof commands / sizeof commands[0]];
        const char *nearest;
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            names[i] = commands[i].name;
        nearest = crier_cli_nearest(argv[1], names, sizeof names / sizeof names[0]);
        fprintf(stderr, "crier: unknown command '%s'\n", argv[1]);
        if (nearest)
            fprintf(stderr, "did you mean crier %s?\n", nearest);
        fputs("crier --help lists the commands\n", stderr);
    }
    return 2;
}
