/* bench_util.h — what the benchmarks (crier bench fanout|deliver|feed) share:
 * clocks and the machine's load, one-shot SQL, medians and quantiles, child
 * processes (nginx, crier serve) with their logs, free ports, files. Errors
 * are printed as `crier bench: …`.
 *
 * Layer: bench (src/bench/), may use cli and every layer below it.
 * Calls into: cli (cli), alloc, clock (base), database (pg), migrate (pg), bench_cpu.
 */
#ifndef CRIER_BENCH_UTIL_H
#define CRIER_BENCH_UTIL_H

#include "database.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Wall-clock seconds (monotonic ones: crier_clock_s, clock.h). */
double crier_bench_real(void);
/* Sleeps s seconds (through signals). */
void crier_bench_sleep(double s);
/* The machine's 1-minute load average (NAN if unknown): how busy the shared
 * machine was, to read the figures by. */
double crier_bench_load(void);

/* Opens the bench's database and migrates it: on the embedded cluster (no
 * --database given) its own database dbname, made afresh unless reuse (then
 * only when missing, or when rebuild); with --database that database, which
 * must hold no event of a tenant other than tenant (the bench empties crier's
 * tables). Fills conninfo (len bytes), connects *conn, sets *fresh when the
 * database was just created. Returns 0, or -1 (message printed). */
int crier_bench_open_database(const char *database, const char *data_dir, crier_database *db,
                              const char *dbname, bool reuse, bool rebuild, const char *tenant,
                              char *conninfo, size_t len, PGconn **conn, bool *fresh);

/* Empties crier's event, notification, delivery and attempt tables (and what
 * references them), ids from 1 again: a bench's start on --database. */
#define CRIER_BENCH_EMPTY_QUEUE                                                                    \
    "TRUNCATE crier.events, crier.notifications, crier.deliveries, crier.delivery_attempts"        \
    " RESTART IDENTITY CASCADE"

/* Runs one statement. Returns 0, or -1 (message printed). */
int crier_bench_exec(PGconn *conn, const char *sql);
/* Runs a query returning one row of numbers; stores up to n columns into out
 * (NULL values as NAN). Returns 0 or -1 (message printed). */
int crier_bench_query_numbers(PGconn *conn, const char *sql, double *out, int n);

/* qsort comparator of doubles. */
int crier_bench_cmp_double(const void *a, const void *b);
/* Median, min and max of the non-NAN values of v (n values; v is not
 * changed). All NAN when there is none. */
void crier_bench_stats(const double *v, int n, double *med, double *lo, double *hi);
/* The p-quantile (0 < p <= 1, nearest rank) of sorted values v[0..n). */
double crier_bench_quantile(const double *v, size_t n, double p);
/* The q-quantile (0 < q <= 1) of the observations a histogram gained between
 * two readings: le[0..n) are its buckets' upper bounds, ascending (the last
 * may be INFINITY), before and after the observations per bucket (not
 * cumulative) at each reading. Linear within the bucket that holds it, from
 * the bound below (0 for the first), as Prometheus's histogram_quantile; the
 * highest finite bound when that bucket is +Inf; NAN without observations. */
double crier_bench_histogram_quantile(const double *le, const double *before, const double *after, int n,
                                      double q);

/* Writes into argv the start of a `crier serve` command line (this binary)
 * on the bench's database and rules, migrations already applied, loopback
 * webhook targets allowed; returns how many entries it wrote (the caller
 * adds its own options and the terminating NULL). */
int crier_bench_serve_argv(char **argv, const char *conninfo, const char *rules_dir, const char *lua_dir);
/* Starts argv[0] with argv, stdin from /dev/null and stdout/stderr into
 * log_path, no other descriptor inherited. Returns the pid, or -1 (message
 * printed). */
pid_t crier_bench_spawn(char *const argv[], const char *log_path);
/* Waits up to timeout_s for child pid. Returns its exit status, 128 + the
 * signal that killed it, or -1 if it is still running. */
int crier_bench_wait(pid_t pid, double timeout_s);
/* crier_bench_wait that also adds the child's CPU time (user + system,
 * seconds) to *cpu_s when it has exited (cpu_s may be NULL). */
int crier_bench_wait_cpu(pid_t pid, double timeout_s, double *cpu_s);
/* Stops child *pid (SIGTERM, then SIGKILL after grace_s) and reaps it; sets
 * *pid to 0. Returns its exit status as crier_bench_wait does. */
int crier_bench_stop_child(pid_t *pid, double grace_s);
/* crier_bench_stop_child that also adds the child's CPU time to *cpu_s. */
int crier_bench_stop_child_cpu(pid_t *pid, double grace_s, double *cpu_s);
/* Prints the last lines of a log file to stderr (a failure's context). */
void crier_bench_print_tail(const char *path);

/* A TCP port on 127.0.0.1 that is free right now (0 on failure). */
int crier_bench_free_port(void);
/* True when something accepts connections on 127.0.0.1:port. */
bool crier_bench_port_open(int port);
/* Writes a file. Returns 0 or -1 (message printed). */
int crier_bench_write_file(const char *path, const char *text);
/* Removes a directory tree (best effort). */
void crier_bench_rm_tree(const char *dir);

#endif
