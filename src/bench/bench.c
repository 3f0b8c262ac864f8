/* bench.c — `crier bench`: benchmarks that print, from one run, the figures an
 * issue names and their ratio to a baseline measured beside them. */
#include "bench.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char bench_help[] =
    "usage: crier bench fanout|deliver|feed|soak [options]   (crier bench BENCHMARK --help)\n"
    "\n"
    "benchmarks:\n"
    "  fanout   fan-out rows/s (keys + idempotent batch insert + RETURNING) vs raw COPY\n"
    "  deliver  webhook deliveries/s to a local nginx and p50/p99 commit-to-receiver latency\n"
    "           vs the SQL floor (the same claims and results with no send)\n"
    "  feed     p50/p99 of a feed's first page, a deep page, the unread count and\n"
    "           mark-all-read through the HTTP API (1,000,000 items) vs the same SQL\n"
    "  soak     a steady rate for N minutes with retention on: the last minute's rate\n"
    "           against the first, backlog, lag, dead tuples, sizes, bytes/notification\n";

int crier_cmd_bench(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fputs(bench_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "fanout"))
        return crier_bench_fanout(argc - 1, argv + 1);
    if (!strcmp(argv[1], "deliver"))
        return crier_bench_deliver(argc - 1, argv + 1);
    if (!strcmp(argv[1], "soak"))
        return crier_bench_soak(argc - 1, argv + 1);
    if (!strcmp(argv[1], "feed"))
        return crier_bench_feed(argc - 1, argv + 1);
    crier_cli_error("bench", "unknown benchmark '%s' (crier bench --help lists them)", argv[1]);
    return 2;
}
