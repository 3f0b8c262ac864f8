/* bench.c — `crier bench`: benchmarks that print, from one run, the figures an
 * issue names and their ratio to a baseline measured beside them. */
#include "bench.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char bench_help[] =
    "usage: crier bench fanout|pipeline|deliver|feed|timers|soak [options]   (crier bench BENCHMARK --help)\n"
    "\n"
    "benchmarks:\n"
    "  fanout   fan-out rows/s (keys + idempotent batch insert + RETURNING) vs raw COPY\n"
    "  pipeline the whole fan-out of crier serve (rules, claim, locks, keys, rows, events\n"
    "           done; 1 and 2 workers) vs a raw COPY of the rows it produced, with each\n"
    "           statement's share of the server's time\n"
    "  deliver  webhook deliveries/s to a local nginx and p50/p99 commit-to-receiver latency\n"
    "           vs the SQL floor (the same claims and results with no send)\n"
    "  feed     p50/p99 of a feed's first page, a deep page, the unread count and\n"
    "           mark-all-read through the HTTP API (1,000,000 items) vs the same SQL\n"
    "  timers   lateness p50/p99 of 100,000 delay timers due in one second and timers\n"
    "           fired/s vs the SQL floor of the same claim; digest of 100,000 events\n"
    "           into 1,000 digests: events/s vs plain fan-out, and the flush time\n"
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
    if (!strcmp(argv[1], "pipeline"))
        return crier_bench_pipeline(argc - 1, argv + 1);
    if (!strcmp(argv[1], "deliver"))
        return crier_bench_deliver(argc - 1, argv + 1);
    if (!strcmp(argv[1], "soak"))
        return crier_bench_soak(argc - 1, argv + 1);
    if (!strcmp(argv[1], "feed"))
        return crier_bench_feed(argc - 1, argv + 1);
    if (!strcmp(argv[1], "timers"))
        return crier_bench_timers(argc - 1, argv + 1);
    crier_cli_error("bench", "unknown benchmark '%s' (crier bench --help lists them)", argv[1]);
    return 2;
}
