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
    "  bench     benchmarks (bench fanout, deliver, feed)\n"
    "  cluster   manage a private PostgreSQL cluster (start|stop|url DIR)\n"
    "  feed      a person's feed: list, counts, read-all, mark, join/leave audiences\n"
    "  dead      list / replay dead letters (failed deliveries, quarantined events)\n"
    "  keys      API keys of the HTTP API (create, list, revoke, rotate-secret)\n"
    "  token     sign a short-lived user token for a person's own feed\n"
    "\n"
    "environment: CRIER_DATABASE_URL (libpq connection string), CRIER_DATA_DIR,\n"
    "CRIER_RULES, CRIER_LUA_DIR, CRIER_SET_<NAME>=VALUE, CRIER_LOG=debug|info|warn|error,\n"
    "CRIER_CONFIG (a Lua config file, as --config FILE: see examples/crier.conf.lua)\n";

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
} command;

int main(int argc, char **argv)
{
    static const command commands[] = {
        {"serve", crier_cmd_serve},   {"emit", crier_cmd_emit},       {"migrate", crier_cmd_migrate},
        {"check", crier_cmd_check},   {"try", crier_cmd_try},         {"status", crier_cmd_status},
        {"demo", crier_cmd_demo},     {"bench", crier_cmd_bench},     {"cluster", crier_cmd_cluster},
        {"dead", crier_cmd_dead},     {"feed", crier_cmd_feed},     {"keys", crier_cmd_keys},       {"token", crier_cmd_token},
    };
    int rc;

    crier_log_init_from_env();
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
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
    fprintf(stderr, "crier: unknown command '%s' (crier --help lists them)\n", argv[1]);
    return 2;
}
