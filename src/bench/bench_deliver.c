/* bench_deliver.c — `crier bench deliver`: webhook delivery throughput and
 * latency against a real local HTTP receiver (nginx answering 204), beside the
 * SQL floor of the same deliveries (claimed and completed by the delivery
 * worker's statements, with no send). Repeats, alternates the order of the two
 * throughput runs, and reports medians with their spread.
 *
 * Per run:
 *   1. preload: events are emitted with crier.emit and fanned out by the engine
 *      in-process (delivery.no_send: the deliveries it creates are completed
 *      without sending); the fanned-out deliveries are kept in a snapshot
 *      table, reset to "due now, never attempted";
 *   2. throughput (HTTP): the snapshot is restored and `crier serve
 *      --exit-when-idle` runs as a child process, delivering every row to
 *      nginx; deliveries/s from crier.deliveries.delivered_at;
 *   3. floor: the snapshot is restored and the engine runs in-process with
 *      delivery.no_send (same claim and result statements, no HTTP);
 *      deliveries/s measured the same way (2 and 3 swap order on odd runs);
 *   4. latency: `crier serve` runs as a child; events are emitted at a fixed
 *      rate, each in its own committed transaction, and each event's latency is
 *      the receiver's log time of its webhook minus the time its commit
 *      returned. */
#define _GNU_SOURCE
#include "bench.h"
#include "alloc.h"
#include "bench_cpu.h"
#include "bench_util.h"
#include "cli.h"
#include "clock.h"
#include "engine.h"
#include "keys.h"
#include "log.h"
#include "migrate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libpq-fe.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char bench_deliver_help[] =
    "usage: crier bench deliver [--deliveries N] [--recipients M] [--rate R] [--seconds S]\n"
    "                           [--emit-connections C] [--repeat K] [--delivery-batch B]\n"
    "                           [--max-inflight I] [--nginx PATH] [--keep] [--json]\n"
    "                           [--database URL | --data-dir DIR] [--lua-dir DIR]\n"
    "\n"
    "Starts a local HTTP receiver (nginx returning 204, logging each request's time\n"
    "and webhook-id) and measures, per run:\n"
    "  throughput  N webhook deliveries (N/M events of M recipients, fanned out\n"
    "              beforehand) delivered by `crier serve --exit-when-idle`:\n"
    "              deliveries/s from crier.deliveries.delivered_at;\n"
    "  floor       the same N deliveries claimed and completed by the delivery\n"
    "              worker's SQL with no send (in-process engine, delivery.no_send);\n"
    "  latency     events offered at R/s for S seconds (one recipient each, each\n"
    "              `SELECT crier.emit(...)` its own transaction, over C connections)\n"
    "              to a running `crier serve`: p50/p99 of the receiver's log time\n"
    "              minus the time the event's commit returned, in ms; and the\n"
    "              p50/p99 of its stages alone, from the rows it left: commit ->\n"
    "              the fan-out batch's start, -> the send's start, -> the answer.\n"
    "Repeats K times (the throughput and floor runs alternate their order), prints\n"
    "medians, min/max and the ratio deliveries/s / floor/s. --json prints one object.\n"
    "--seconds 0 skips the latency phase.\n"
    "Uses a fresh database crier_bench_deliver on the embedded cluster by default;\n"
    "with --database (or CRIER_DATABASE_URL) it EMPTIES crier's tables there and\n"
    "refuses if they hold events of a tenant other than 'bench'. The rules are\n"
    "generated (--rules is ignored). --keep keeps the work directory (nginx config\n"
    "and logs, serve logs, rules); it is kept anyway when the bench fails.\n"
    "Defaults: N=100000 (a throughput window of a few seconds: at 20000 it lasted\n"
    "under one, mostly the daemon filling its pipeline), M=10, R=500, S=10, C=8,\n"
    "K=1, B and I: serve's defaults,\n"
    "nginx: /usr/sbin/nginx.\n";

typedef struct {
    int deliveries, recipients, rate, seconds, repeat, delivery_batch, max_inflight,
        emit_connections;
    const char *nginx;
    bool json, keep;
} bench_opts;

/* Figures of one run; NAN where a phase was skipped. */
typedef struct {
    double http_per_s, receiver_per_s, floor_per_s;
    /* CPU time per delivery (µs, user + system) of the throughput run's parts:
     * crier serve, nginx, the PostgreSQL server (NAN when it is not local);
     * and of the floor run's (this process's engine, the server) */
    double cpu_crier_us, cpu_receiver_us, cpu_server_us, floor_cpu_crier_us, floor_cpu_server_us;
    double p50_ms, p99_ms, max_ms, emit_per_s;
    /* where the latency run's time went, per delivery (ms, p50 and p99 of
     * each stage alone): commit -> the fan-out batch's start, that start ->
     * the send's start (the batch's claim, rules, write and commit, then the
     * delivery claim), the send -> its answer (bench_latency_stages) */
    double to_fanout_p50, to_fanout_p99, to_send_p50, to_send_p99, http_p50, http_p99;
    double load; /* 1-minute load average at the end of the run */
    long connections;
} bench_run;

/* Everything the bench started, so that every exit path can stop it. */
typedef struct {
    bench_opts o;
    crier_cli cli;
    char dir[256]; /* work directory (mkdtemp) */
    char rules_dir[300];
    char conninfo[2400];
    int port;
    pid_t nginx_pid;
    pid_t serve_pid;
    pid_t server_pid; /* the local PostgreSQL server's postmaster, 0 if not local */
    double nginx_cpu_s; /* CPU time of the nginx stopped last */
    PGconn *conn;
    int n_logs; /* numbers the nginx and serve logs of the phases */
} bench_ctx;

#define BENCH_TENANT "bench"
#define BENCH_TYPE "bench.ping"

/* Writes the nginx configuration: one process (master_process off, so the
 * `user` directive does not apply and root and non-root run it alike), every
 * path inside the work directory, 204 for every request, one access-log line
 * per request with the time ($msec: the time of the loop pass that finished
 * the request, millisecond resolution) and the webhook-id header, written
 * from a 64 KiB buffer (and at exit, before the bench reads it: not a write
 * per request, 3 µs of the receiver's CPU per request on this host), and
 * keepalive limits high enough that curl's connections are reused. */
static int bench_nginx_config(const bench_ctx *b)
{
    char path[400], conf[4096];
    static const char *const temps[] = {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"};
    char temp_lines[1024];
    size_t n = 0;

    for (size_t i = 0; i < sizeof temps / sizeof temps[0]; i++)
        n += (size_t)snprintf(temp_lines + n, sizeof temp_lines - n,
                              "    %s_temp_path %s/nginx-temp/%s;\n", temps[i], b->dir, temps[i]);
    snprintf(conf, sizeof conf,
             "# Generated by crier bench deliver.\n"
             "daemon off;\n"
             "master_process off;\n"
             "worker_processes 1;\n"
             "pid %s/nginx.pid;\n"
             "error_log %s/nginx-error.log warn;\n"
             "events { worker_connections 4096; }\n"
             "http {\n"
             "%s"
             "    log_format crier_bench '$msec $http_webhook_id $status $connection "
             "$connection_requests';\n"
             "    access_log off;\n"
             "    keepalive_requests 10000000;\n"
             "    keepalive_timeout 600s;\n"
             "    server {\n"
             "        listen 127.0.0.1:%d;\n"
             "        access_log %s/access.log crier_bench buffer=64k flush=1s;\n"
             "        location / { return 204; }\n"
             "    }\n"
             "}\n",
             b->dir, b->dir, temp_lines, b->port, b->dir);
    snprintf(path, sizeof path, "%s/nginx-temp", b->dir);
    if (mkdir(path, 0755) < 0 && errno != EEXIST) {
        crier_cli_error("bench", "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/nginx.conf", b->dir);
    return crier_bench_write_file(path, conf);
}

/* Starts nginx with an empty access log and waits until it accepts
 * connections. Returns 0 or -1 (message and error log printed). */
static int bench_nginx_start(bench_ctx *b)
{
    char conf[400], errlog[400], out[400], access[400];
    char *argv[] = {(char *)b->o.nginx, "-p", b->dir, "-c", conf, "-e", errlog, NULL};

    snprintf(conf, sizeof conf, "%s/nginx.conf", b->dir);
    snprintf(errlog, sizeof errlog, "%s/nginx-error.log", b->dir);
    snprintf(out, sizeof out, "%s/nginx.out", b->dir);
    snprintf(access, sizeof access, "%s/access.log", b->dir);
    unlink(access);
    b->nginx_pid = crier_bench_spawn(argv, out);
    if (b->nginx_pid < 0) {
        b->nginx_pid = 0;
        return -1;
    }
    for (double until = crier_clock_s() + 10; crier_clock_s() < until; crier_bench_sleep(0.01)) {
        if (crier_bench_port_open(b->port))
            return 0;
        int rc = crier_bench_wait(b->nginx_pid, 0);
        if (rc >= 0) {
            b->nginx_pid = 0;
            crier_cli_error("bench", "nginx exited with status %d at start (port %d)", rc, b->port);
            crier_bench_print_tail(out);
            crier_bench_print_tail(errlog);
            return -1;
        }
    }
    crier_cli_error("bench", "nginx did not accept connections on 127.0.0.1:%d within 10 s",
                    b->port);
    crier_bench_stop_child(&b->nginx_pid, 5);
    crier_bench_print_tail(errlog);
    return -1;
}

/* Stops nginx (all log lines are written when it has exited) and keeps its
 * access log as access-<n>.log; writes that path into kept. */
static int bench_nginx_stop(bench_ctx *b, char *kept, size_t kept_len)
{
    char access[400];
    b->nginx_cpu_s = 0;
    crier_bench_stop_child_cpu(&b->nginx_pid, 10, &b->nginx_cpu_s);
    snprintf(access, sizeof access, "%s/access.log", b->dir);
    snprintf(kept, kept_len, "%s/access-%d.log", b->dir, ++b->n_logs);
    if (rename(access, kept) < 0) {
        crier_cli_error("bench", "nginx wrote no access log (%s): %s", access, strerror(errno));
        return -1;
    }
    return 0;
}

/* Starts `crier serve` (this binary) on the bench database and rules, with
 * loopback targets allowed; with exit_when_idle it exits once all is
 * delivered. Its output goes to serve-<n>.log, whose path goes to log. */
static int bench_serve_start(bench_ctx *b, bool exit_when_idle, char *log, size_t log_len)
{
    char batch[16], inflight[16];
    char *argv[24];
    int n = crier_bench_serve_argv(argv, b->conninfo, b->rules_dir, b->cli.lua_dir);

    if (exit_when_idle)
        argv[n++] = "--exit-when-idle";
    if (b->o.delivery_batch > 0) {
        snprintf(batch, sizeof batch, "%d", b->o.delivery_batch);
        argv[n++] = "--delivery-batch";
        argv[n++] = batch;
    }
    if (b->o.max_inflight > 0) {
        snprintf(inflight, sizeof inflight, "%d", b->o.max_inflight);
        argv[n++] = "--max-inflight";
        argv[n++] = inflight;
    }
    argv[n] = NULL;
    snprintf(log, log_len, "%s/serve-%d.log", b->dir, ++b->n_logs);
    b->serve_pid = crier_bench_spawn(argv, log);
    if (b->serve_pid < 0) {
        b->serve_pid = 0;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The receiver's log */

typedef struct {
    double t;    /* $msec */
    char id[48]; /* webhook-id, "-" when absent */
    int status;
    long connection;
} bench_line;

/* Reads the access log at path into *lines (caller frees). Returns the number
 * of lines, or -1 (message printed). */
static long bench_read_log(const char *path, bench_line **lines)
{
    FILE *f = fopen(path, "r");
    char buf[512];
    size_t n = 0, cap = 1024;
    bench_line *v;

    *lines = NULL;
    if (!f) {
        crier_cli_error("bench", "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    v = crier_xmalloc(cap * sizeof *v);
    while (fgets(buf, sizeof buf, f)) {
        bench_line l;
        long requests;
        if (sscanf(buf, "%lf %47s %d %ld %ld", &l.t, l.id, &l.status, &l.connection, &requests) !=
            5)
            continue;
        if (n == cap) {
            cap *= 2;
            v = crier_xrealloc(v, cap * sizeof *v);
        }
        v[n++] = l;
    }
    fclose(f);
    *lines = v;
    return (long)n;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

/* Requests per second at the receiver: (lines - 1) / (last time - first
 * time), NAN with fewer than two lines; the number of distinct connections
 * the requests came on into *connections. */
static double bench_receiver_rate(const bench_line *l, long n, long *connections)
{
    double lo = INFINITY, hi = -INFINITY;
    long *conn = crier_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *conn);
    for (long i = 0; i < n; i++) {
        lo = l[i].t < lo ? l[i].t : lo;
        hi = l[i].t > hi ? l[i].t : hi;
        conn[i] = l[i].connection;
    }
    qsort(conn, (size_t)n, sizeof *conn, cmp_long);
    *connections = 0;
    for (long i = 0; i < n; i++)
        if (i == 0 || conn[i] != conn[i - 1])
            (*connections)++;
    free(conn);
    return n > 1 && hi > lo ? (double)(n - 1) / (hi - lo) : NAN;
}

/* ------------------------------------------------------------------------ */
/* Database steps */

/* Runs the statements of a NULL-terminated list in order, stopping at the
 * first failure. Returns 0 or -1 (message printed). */
static int bench_exec_all(PGconn *conn, const char *const *sqls)
{
    for (; *sqls; sqls++)
        if (crier_bench_exec(conn, *sqls) < 0)
            return -1;
    return 0;
}

#define BENCH_TRUNCATE_ENDPOINTS                                                                   \
    "DO $$ BEGIN IF to_regclass('crier.endpoints') IS NOT NULL THEN TRUNCATE crier.endpoints;"     \
    " END IF; END $$"

/* Empties crier's tables (events, notifications, deliveries and whatever
 * references them, endpoints) and removes the snapshot. */
static int bench_reset_all(PGconn *conn)
{
    static const char *const sqls[] = {
        CRIER_BENCH_EMPTY_QUEUE, BENCH_TRUNCATE_ENDPOINTS,
        "DROP TABLE IF EXISTS crier_bench_deliver.snapshot", NULL};
    return bench_exec_all(conn, sqls);
}

/* Puts the snapshot back as crier.deliveries (every row due, never attempted;
 * the attempts recorded by the last run go too), with fresh indexes and
 * statistics and a checkpoint behind it, so that every timed run starts from
 * the same state. */
static int bench_restore(PGconn *conn)
{
    static const char *const sqls[] = {
        "TRUNCATE crier.deliveries, crier.delivery_attempts CASCADE",
        BENCH_TRUNCATE_ENDPOINTS,
        "INSERT INTO crier.deliveries SELECT * FROM crier_bench_deliver.snapshot",
        "ANALYZE crier.deliveries",
        "CHECKPOINT",
        NULL};
    return bench_exec_all(conn, sqls);
}

/* Runs the engine in this process until nothing is due, completing claimed
 * deliveries without sending them. */
static int bench_engine_no_send(bench_ctx *b)
{
    crier_engine_config cfg;
    crier_engine_stats stats;
    char err[8192];

    memset(&cfg, 0, sizeof cfg);
    cfg.conninfo = b->conninfo;
    cfg.lua_dir = b->cli.lua_dir;
    cfg.rules_dir = b->rules_dir;
    cfg.poll_interval = 1.0;
    cfg.shutdown_deadline = 10.0;
    cfg.exit_when_idle = true;
    cfg.handle_signals = false;
    cfg.delivery.batch_size = b->o.delivery_batch;
    cfg.delivery.max_inflight = b->o.max_inflight;
    cfg.delivery.no_send = true;
    if (crier_engine_run(&cfg, &stats, err, sizeof err) < 0) {
        crier_cli_error("bench", "engine: %s", err);
        return -1;
    }
    return 0;
}

/* Checks that all n deliveries are delivered and computes their rate from
 * delivered_at: (n - those of the first completed batch) / (last - first).
 * Returns the rate, or -1 (message printed). */
static double bench_delivered_rate(PGconn *conn, long n, const char *what)
{
    double v[4];
    if (crier_bench_query_numbers(
            conn,
            "WITH d AS (SELECT delivered_at FROM crier.deliveries WHERE state = 'delivered'),"
            " m AS (SELECT min(delivered_at) AS lo, max(delivered_at) AS hi FROM d)"
            " SELECT (SELECT count(*) FROM d),"
            " (SELECT count(*) FROM d, m WHERE d.delivered_at = m.lo),"
            " (SELECT extract(epoch FROM hi - lo) FROM m),"
            " (SELECT count(*) FROM crier.deliveries)",
            v, 4) < 0)
        return -1;
    if ((long)v[0] != n || (long)v[3] != n) {
        PGresult *res = PQexec(conn, "SELECT state, count(*), max(last_error) FROM crier.deliveries"
                                     " GROUP BY state ORDER BY state");
        crier_cli_error("bench",
                        "%s: %.0f of %ld deliveries delivered (%.0f rows); by state:", what, v[0],
                        n, v[3]);
        for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++)
            fprintf(stderr, "  %s: %s%s%s\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                    PQgetisnull(res, i, 2) ? "" : ", last error: ", PQgetvalue(res, i, 2));
        PQclear(res);
        return -1;
    }
    if (!(v[2] > 0) || v[0] - v[1] < 1) {
        crier_cli_error("bench",
                        "%s: all %ld deliveries completed in one batch: too few to time (raise "
                        "--deliveries)",
                        what, n);
        return -1;
    }
    return (v[0] - v[1]) / v[2];
}

/* ------------------------------------------------------------------------ */
/* Phases */

/* Emits the throughput phase's events, fans them out in-process (no send) and
 * keeps the resulting deliveries, reset to due, in the snapshot table. */
static int bench_preload(bench_ctx *b, long events)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(crier.emit('" BENCH_TENANT "', '" BENCH_TYPE "', 'e' || g,"
             " jsonb_build_object('n', %d))) FROM generate_series(1, %ld) g",
             b->o.recipients, events);
    static const char *const snapshot[] = {
        "CREATE TABLE crier_bench_deliver.snapshot AS SELECT * FROM crier.deliveries",
        "UPDATE crier_bench_deliver.snapshot SET state = 'pending', attempts = 0,"
        " due_at = now() - interval '1 second', lease_until = NULL, last_status = NULL, last_error = NULL,"
        " delivered_at = NULL",
        NULL};
    if (bench_reset_all(b->conn) < 0 || crier_bench_exec(b->conn, sql) < 0 || bench_engine_no_send(b) < 0)
        return -1;
    return bench_exec_all(b->conn, snapshot);
}

/* The server's CPU seconds so far, once the backends of crier's connections
 * (a serve that exited, the in-process engine) are gone, so that their time is
 * counted; NAN when the server is not local. */
static double bench_server_cpu(bench_ctx *b)
{
    if (!b->server_pid)
        return NAN;
    for (double until = crier_clock_s() + 10;;) {
        double v[1] = {0};
        if (crier_bench_query_numbers(b->conn,
                                      "SELECT count(*) FROM pg_stat_activity"
                                      " WHERE application_name LIKE 'crier %' AND pid <> pg_backend_pid()",
                                      v, 1) < 0)
            return NAN;
        if (v[0] == 0 || crier_clock_s() >= until)
            break;
        crier_bench_sleep(0.01);
    }
    return crier_bench_server_cpu_s(b->server_pid);
}

/* The HTTP throughput run: serve --exit-when-idle against nginx. */
static int bench_phase_http(bench_ctx *b, long n, bench_run *run)
{
    char serve_log[400], access[400];
    bench_line *lines = NULL;
    long n_lines;
    int rc;
    double crier_cpu = 0, server_cpu;

    if (bench_restore(b->conn) < 0 || bench_nginx_start(b) < 0)
        return -1;
    server_cpu = bench_server_cpu(b);
    if (bench_serve_start(b, true, serve_log, sizeof serve_log) < 0)
        goto fail;
    rc = crier_bench_wait_cpu(b->serve_pid, 60 + (double)n / 200, &crier_cpu);
    if (rc != 0) {
        if (rc < 0)
            crier_bench_stop_child(&b->serve_pid, 15);
        b->serve_pid = 0;
        crier_cli_error("bench", "crier serve %s", rc < 0 ? "did not finish in time" : "failed");
        crier_bench_print_tail(serve_log);
        goto fail;
    }
    b->serve_pid = 0;
    server_cpu = bench_server_cpu(b) - server_cpu;
    if (bench_nginx_stop(b, access, sizeof access) < 0)
        return -1;
    run->cpu_crier_us = 1e6 * crier_cpu / (double)n;
    run->cpu_receiver_us = 1e6 * b->nginx_cpu_s / (double)n;
    run->cpu_server_us = 1e6 * server_cpu / (double)n;
    run->http_per_s = bench_delivered_rate(b->conn, n, "throughput");
    if (run->http_per_s < 0) {
        crier_bench_print_tail(serve_log);
        return -1;
    }
    n_lines = bench_read_log(access, &lines);
    if (n_lines < 0)
        return -1;
    if (n_lines < n)
        crier_cli_error("bench", "warning: the receiver logged %ld requests for %ld deliveries",
                        n_lines, n);
    run->receiver_per_s = bench_receiver_rate(lines, n_lines, &run->connections);
    free(lines);
    return 0;
fail:
    bench_nginx_stop(b, access, sizeof access);
    return -1;
}

/* The floor run: the same deliveries, claimed and completed without send. */
static int bench_phase_floor(bench_ctx *b, long n, bench_run *run)
{
    double self_cpu, server_cpu;
    if (bench_restore(b->conn) < 0)
        return -1;
    server_cpu = bench_server_cpu(b);
    self_cpu = crier_bench_self_cpu_s();
    if (bench_engine_no_send(b) < 0)
        return -1;
    run->floor_cpu_crier_us = 1e6 * (crier_bench_self_cpu_s() - self_cpu) / (double)n;
    run->floor_cpu_server_us = 1e6 * (bench_server_cpu(b) - server_cpu) / (double)n;
    run->floor_per_s = bench_delivered_rate(b->conn, n, "floor");
    return run->floor_per_s < 0 ? -1 : 0;
}

/* Waits until at least want deliveries are delivered (or timeout_s passes, or
 * the serve child dies). Returns 0 or -1 (message printed). */
static int bench_wait_delivered(bench_ctx *b, long want, double timeout_s, const char *serve_log)
{
    double until = crier_clock_s() + timeout_s, v[1] = {0};
    for (;;) {
        if (crier_bench_query_numbers(b->conn,
                                "SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'",
                                v, 1) < 0)
            return -1;
        if ((long)v[0] >= want)
            return 0;
        int rc = crier_bench_wait(b->serve_pid, 0);
        if (rc >= 0) {
            b->serve_pid = 0;
            crier_cli_error("bench",
                            "crier serve exited (status %d) with %.0f of %ld deliveries delivered",
                            rc, v[0], want);
            crier_bench_print_tail(serve_log);
            return -1;
        }
        if (crier_clock_s() >= until) {
            crier_cli_error("bench", "only %.0f of %ld deliveries were delivered within %.0f s",
                            v[0], want, timeout_s);
            crier_bench_print_tail(serve_log);
            return -1;
        }
        crier_bench_sleep(0.02);
    }
}

typedef struct {
    char id[CRIER_KEY_ID_LEN + 1];
    long index;
} bench_id;

static int cmp_id(const void *a, const void *b)
{
    return strcmp(((const bench_id *)a)->id, ((const bench_id *)b)->id);
}

/* Emits one event of the latency phase (entity l<index>, one recipient) in
 * its own transaction. Returns 0 or -1 (message printed). */
static int bench_emit_one(PGconn *conn, const char *entity)
{
    const char *params[1] = {entity};
    PGresult *res = PQexecPrepared(conn, "bench_emit", 1, params, NULL, NULL, 0);
    int ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok)
        crier_cli_error("bench", "emit: %s", PQresultErrorMessage(res));
    PQclear(res);
    return ok ? 0 : -1;
}

#define BENCH_EMIT_SQL                                                                             \
    "SELECT crier.emit('" BENCH_TENANT "', '" BENCH_TYPE "', $1, '{\"n\": 1}'::jsonb)"

/* Prepares the emit statement on conn. Returns 0 or -1 (message printed). */
static int bench_prepare_emit(PGconn *conn)
{
    PGresult *res = PQprepare(conn, "bench_emit", BENCH_EMIT_SQL, 1, NULL);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK ||
             strstr(PQresultErrorMessage(res), "already exists");
    if (!ok)
        crier_cli_error("bench", "prepare: %s", PQresultErrorMessage(res));
    PQclear(res);
    return ok ? 0 : -1;
}

/* One emitting connection and the event it has in flight (-1: none). */
typedef struct {
    PGconn *conn;
    long event;
} bench_emitter;

/* Reads what arrived on e; when its statement is complete (committed: the
 * server has sent ReadyForQuery), records the commit time of its event and
 * makes e idle. Returns 1 when an event completed, 0 if not yet, -1 on error. */
static int bench_emitter_read(bench_emitter *e, double *commit)
{
    if (!PQconsumeInput(e->conn)) {
        crier_cli_error("bench", "emit: %s", PQerrorMessage(e->conn));
        return -1;
    }
    while (!PQisBusy(e->conn)) {
        PGresult *res = PQgetResult(e->conn);
        if (!res) {
            commit[e->event] = crier_bench_real();
            e->event = -1;
            return 1;
        }
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            crier_cli_error("bench", "emit: %s", PQresultErrorMessage(res));
            PQclear(res);
            return -1;
        }
        PQclear(res);
    }
    return 0;
}

/* Offers n events at rate per second (event i is due at start + i / rate),
 * each `SELECT crier.emit(...)` in its own autocommit transaction, spread over
 * n_conns connections so that one slow commit does not hold back the
 * schedule: a due event goes out on any idle connection (if none is idle, it
 * waits for the first to become idle). commit[i] receives the wall-clock time
 * at which event i's commit was confirmed. Returns 0 or -1 (message printed). */
static int bench_emit_paced(const char *conninfo, int n_conns, long n, int rate, double *commit)
{
    bench_emitter *em = crier_xcalloc((size_t)n_conns, sizeof *em);
    struct pollfd *fds = crier_xcalloc((size_t)n_conns, sizeof *fds);
    long next = 0, done = 0;
    double start;
    int rc = -1;

    for (int c = 0; c < n_conns; c++) {
        em[c].event = -1;
        em[c].conn = PQconnectdb(conninfo);
        if (PQstatus(em[c].conn) != CONNECTION_OK) {
            crier_cli_error("bench", "cannot connect: %s", PQerrorMessage(em[c].conn));
            goto out;
        }
        if (bench_prepare_emit(em[c].conn) < 0 || PQsetnonblocking(em[c].conn, 1) < 0)
            goto out;
    }
    start = crier_clock_s() + 0.01;
    while (done < n) {
        double now = crier_clock_s();
        int busy = 0;
        /* Send every due event that has an idle connection to go on. */
        for (int c = 0; c < n_conns && next < n && start + (double)next / rate <= now; c++) {
            char entity[32];
            const char *params[1] = {entity};
            if (em[c].event >= 0)
                continue;
            snprintf(entity, sizeof entity, "l%ld", next);
            if (!PQsendQueryPrepared(em[c].conn, "bench_emit", 1, params, NULL, NULL, 0)) {
                crier_cli_error("bench", "emit: %s", PQerrorMessage(em[c].conn));
                goto out;
            }
            while (PQflush(em[c].conn) == 1) /* rare: the socket buffer is full */
                crier_bench_sleep(0.0001);
            em[c].event = next++;
        }
        for (int c = 0; c < n_conns; c++) {
            fds[c].fd = em[c].event >= 0 ? PQsocket(em[c].conn) : -1;
            fds[c].events = POLLIN;
            fds[c].revents = 0;
            busy += em[c].event >= 0;
        }
        /* Sleep until a result arrives or the next event is due (if there is
         * a connection to send it on). */
        struct timespec ts, *timeout = NULL;
        if (next < n && busy < n_conns) {
            double wait = start + (double)next / rate - crier_clock_s();
            wait = wait > 0 ? wait : 0;
            ts.tv_sec = (time_t)wait;
            ts.tv_nsec = (long)((wait - (double)ts.tv_sec) * 1e9);
            timeout = &ts;
        }
        if (ppoll(fds, (nfds_t)n_conns, timeout, NULL) < 0 && errno != EINTR) {
            crier_cli_error("bench", "poll: %s", strerror(errno));
            goto out;
        }
        for (int c = 0; c < n_conns; c++) {
            if (em[c].event < 0 || !(fds[c].revents & (POLLIN | POLLERR | POLLHUP)))
                continue;
            int r = bench_emitter_read(&em[c], commit);
            if (r < 0)
                goto out;
            done += r;
        }
    }
    rc = 0;
out:
    for (int c = 0; c < n_conns; c++)
        if (em[c].conn)
            PQfinish(em[c].conn);
    free(em);
    free(fds);
    return rc;
}

/* Where the latency run's time went, from the rows it left: each event's
 * created_at (its transaction's start: a single-statement emit, so about its
 * commit), its notification's created_at (the start of the fan-out batch that
 * made it) and its first attempt's started_at and duration (crier's clock, the
 * same machine's). p50 and p99 of each stage alone, in ms: the stages' p99s
 * need not add up to the whole's. */
static int bench_latency_stages(PGconn *conn, bench_run *run)
{
    PGresult *res = PQexec(
        conn, "WITH x AS ("
              "  SELECT extract(epoch FROM n.created_at - e.created_at) * 1000 AS to_fanout,"
              "         extract(epoch FROM a.started_at - n.created_at) * 1000 AS to_send,"
              "         a.duration_ms AS http"
              "  FROM crier.events e JOIN crier.notifications n ON n.event_id = e.id"
              "  JOIN crier.deliveries d ON d.notification_id = n.id"
              "  JOIN crier.delivery_attempts a ON a.delivery_id = d.id AND a.attempt = 1"
              "  WHERE e.tenant = '" BENCH_TENANT "' AND e.entity_id LIKE 'l%')"
              " SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY to_fanout),"
              "        percentile_cont(0.99) WITHIN GROUP (ORDER BY to_fanout),"
              "        percentile_cont(0.5) WITHIN GROUP (ORDER BY to_send),"
              "        percentile_cont(0.99) WITHIN GROUP (ORDER BY to_send),"
              "        percentile_cont(0.5) WITHIN GROUP (ORDER BY http),"
              "        percentile_cont(0.99) WITHIN GROUP (ORDER BY http) FROM x");
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
        crier_cli_error("bench", "latency: the stages could not be read from the database: %s",
                        PQresultStatus(res) == PGRES_TUPLES_OK ? "no attempts recorded" : PQerrorMessage(conn));
        PQclear(res);
        return -1;
    }
    double *stage[] = {&run->to_fanout_p50, &run->to_fanout_p99, &run->to_send_p50,
                       &run->to_send_p99,   &run->http_p50,      &run->http_p99};
    for (int i = 0; i < 6; i++)
        *stage[i] = strtod(PQgetvalue(res, 0, i), NULL);
    PQclear(res);
    return 0;
}

/* The latency run: a running `crier serve`, events emitted at --rate for
 * --seconds, each webhook matched to its event by its id (the notification
 * key of (tenant, type, entity, recipient), computed here as the engine does). */
static int bench_phase_latency(bench_ctx *b, bench_run *run)
{
    long n = (long)b->o.rate * b->o.seconds, n_lines = 0, found = 0, duplicates = 0;
    double *commit = crier_xcalloc((size_t)n, sizeof *commit), *lat = crier_xmalloc((size_t)n * sizeof *lat);
    bench_id *ids = crier_xcalloc((size_t)n, sizeof *ids);
    bench_line *lines = NULL;
    char serve_log[400], access[400], entity[32];
    bool nginx_up = false;
    int rc = -1, st;

    if (bench_reset_all(b->conn) < 0 || crier_bench_exec(b->conn, "CHECKPOINT") < 0)
        goto out;
    if (bench_prepare_emit(b->conn) < 0)
        goto out;
    if (bench_nginx_start(b) < 0)
        goto out;
    nginx_up = true;
    if (bench_serve_start(b, false, serve_log, sizeof serve_log) < 0)
        goto out;
    /* Ready means one event went all the way through. */
    if (bench_emit_one(b->conn, "warmup") < 0 || bench_wait_delivered(b, 1, 30, serve_log) < 0)
        goto out;

    if (bench_emit_paced(b->conninfo, b->o.emit_connections, n, b->o.rate, commit) < 0)
        goto out;
    {
        double lo = INFINITY, hi = -INFINITY;
        for (long i = 0; i < n; i++) {
            lo = commit[i] < lo ? commit[i] : lo;
            hi = commit[i] > hi ? commit[i] : hi;
        }
        run->emit_per_s = n > 1 && hi > lo ? (double)(n - 1) / (hi - lo) : NAN;
    }
    if (bench_wait_delivered(b, n + 1, 30 + b->o.seconds, serve_log) < 0)
        goto out;
    st = crier_bench_stop_child(&b->serve_pid, 15);
    if (st != 0) {
        crier_cli_error("bench", "crier serve exited with status %d on SIGTERM", st);
        crier_bench_print_tail(serve_log);
        goto out;
    }
    nginx_up = false;
    if (bench_nginx_stop(b, access, sizeof access) < 0)
        goto out;

    for (long i = 0; i < n; i++) {
        uint8_t hash[CRIER_KEY_HASH_LEN];
        snprintf(entity, sizeof entity, "l%ld", i);
        crier_key_parts kp = {BENCH_TENANT, BENCH_TYPE, entity, "r0", NULL};
        crier_key_hash(&kp, hash);
        crier_key_hash_id(hash, ids[i].id);
        ids[i].index = i;
        lat[i] = NAN;
    }
    qsort(ids, (size_t)n, sizeof *ids, cmp_id);
    n_lines = bench_read_log(access, &lines);
    if (n_lines < 0)
        goto out;
    for (long j = 0; j < n_lines; j++) {
        bench_id key;
        if (strlen(lines[j].id) != CRIER_KEY_ID_LEN)
            continue;
        memcpy(key.id, lines[j].id, sizeof key.id);
        const bench_id *hit = bsearch(&key, ids, (size_t)n, sizeof *ids, cmp_id);
        if (!hit)
            continue; /* the warm-up event */
        if (!isnan(lat[hit->index])) {
            duplicates++;
            continue;
        }
        lat[hit->index] = (lines[j].t - commit[hit->index]) * 1000.0;
        found++;
    }
    if (found != n) {
        crier_cli_error("bench", "latency: %ld of %ld events reached the receiver's log (%s)",
                        found, n, access);
        goto out;
    }
    if (duplicates)
        crier_cli_error("bench", "warning: latency: %ld webhooks arrived more than once",
                        duplicates);
    qsort(lat, (size_t)n, sizeof *lat, crier_bench_cmp_double);
    run->p50_ms = crier_bench_quantile(lat, (size_t)n, 0.50);
    run->p99_ms = crier_bench_quantile(lat, (size_t)n, 0.99);
    run->max_ms = lat[n - 1];
    if (bench_latency_stages(b->conn, run) < 0)
        goto out;
    rc = 0;
out:
    crier_bench_stop_child(&b->serve_pid, 15);
    if (nginx_up)
        bench_nginx_stop(b, access, sizeof access);
    free(lines);
    free(commit);
    free(lat);
    free(ids);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Set-up, report, entry point */

/* Writes the generated rules: one event type whose payload says how many
 * recipients it has, routed to the webhook channel at the receiver (the
 * engine's default webhook body). */
static int bench_write_rules(bench_ctx *b)
{
    char path[400], text[2048];
    snprintf(b->rules_dir, sizeof b->rules_dir, "%s/rules", b->dir);
    if (mkdir(b->rules_dir, 0755) < 0) {
        crier_cli_error("bench", "cannot create %s: %s", b->rules_dir, strerror(errno));
        return -1;
    }
    snprintf(text, sizeof text,
             "-- Generated by crier bench deliver: payload.n recipients per event, each\n"
             "-- sent one webhook (the default body) at the bench's local receiver.\n"
             "local crier = require \"crier\"\n"
             "\n"
             "crier.event_type \"" BENCH_TYPE "\" {\n"
             "    description = \"crier bench deliver\",\n"
             "    payload = { n = \"integer\" },\n"
             "}\n"
             "\n"
             "crier.rule \"" BENCH_TYPE "\" {\n"
             "    recipients = function(event)\n"
             "        local list = {}\n"
             "        for i = 1, event.payload.n do\n"
             "            list[i] = \"r\" .. (i - 1)\n"
             "        end\n"
             "        return list\n"
             "    end,\n"
             "    channels = { \"webhook\" },\n"
             "    webhook = { url = \"http://127.0.0.1:%d/hooks/bench\" },\n"
             "}\n",
             b->port);
    snprintf(path, sizeof path, "%s/bench.lua", b->rules_dir);
    return crier_bench_write_file(path, text);
}

/* Opens the database (embedded: a fresh crier_bench_deliver; else the given
 * one, if it holds no other tenant's events), migrates and connects. */
static int bench_open_database(bench_ctx *b, crier_database *db)
{
    bool fresh;
    if (crier_bench_open_database(b->cli.database, b->cli.data_dir, db, "crier_bench_deliver", false,
                                  false, BENCH_TENANT, b->conninfo, sizeof b->conninfo, &b->conn,
                                  &fresh) < 0)
        return -1;
    b->server_pid = crier_bench_server_pid(b->conn);
    return crier_bench_exec(b->conn, "CREATE SCHEMA IF NOT EXISTS crier_bench_deliver");
}

static void json_number(const char *name, double v, int decimals, bool comma)
{
    if (isnan(v))
        printf("\"%s\": null%s", name, comma ? ", " : "");
    else
        printf("\"%s\": %.*f%s", name, decimals, v, comma ? ", " : "");
}

/* One figure over the runs: median, min, max and spread ((max - min) / median). */
typedef struct {
    double med, lo, hi, spread_pct;
} bench_figure;

static bench_figure bench_figure_of(const bench_run *runs, int n, size_t offset)
{
    bench_figure f;
    double *v = crier_xmalloc((size_t)n * sizeof *v);
    for (int i = 0; i < n; i++)
        v[i] = *(const double *)((const char *)&runs[i] + offset);
    crier_bench_stats(v, n, &f.med, &f.lo, &f.hi);
    f.spread_pct = f.med > 0 ? 100.0 * (f.hi - f.lo) / f.med : NAN;
    free(v);
    return f;
}

static void bench_report(const bench_opts *o, const bench_run *runs, long deliveries,
                         long latency_events)
{
    bench_figure http = bench_figure_of(runs, o->repeat, offsetof(bench_run, http_per_s));
    bench_figure recv = bench_figure_of(runs, o->repeat, offsetof(bench_run, receiver_per_s));
    bench_figure floor_ = bench_figure_of(runs, o->repeat, offsetof(bench_run, floor_per_s));
    bench_figure p50 = bench_figure_of(runs, o->repeat, offsetof(bench_run, p50_ms));
    bench_figure p99 = bench_figure_of(runs, o->repeat, offsetof(bench_run, p99_ms));
    bench_figure pmax = bench_figure_of(runs, o->repeat, offsetof(bench_run, max_ms));
    bench_figure emit = bench_figure_of(runs, o->repeat, offsetof(bench_run, emit_per_s));
    bench_figure load = bench_figure_of(runs, o->repeat, offsetof(bench_run, load));
    static const struct {
        const char *name;
        size_t p50, p99;
    } stages[] = {
        {"to_fanout", offsetof(bench_run, to_fanout_p50), offsetof(bench_run, to_fanout_p99)},
        {"to_send", offsetof(bench_run, to_send_p50), offsetof(bench_run, to_send_p99)},
        {"http", offsetof(bench_run, http_p50), offsetof(bench_run, http_p99)},
    };
    bench_figure stage_p50[3], stage_p99[3];
    for (int i = 0; i < 3; i++) {
        stage_p50[i] = bench_figure_of(runs, o->repeat, stages[i].p50);
        stage_p99[i] = bench_figure_of(runs, o->repeat, stages[i].p99);
    }
    bench_figure c_crier = bench_figure_of(runs, o->repeat, offsetof(bench_run, cpu_crier_us));
    bench_figure c_recv = bench_figure_of(runs, o->repeat, offsetof(bench_run, cpu_receiver_us));
    bench_figure c_server = bench_figure_of(runs, o->repeat, offsetof(bench_run, cpu_server_us));
    bench_figure f_crier = bench_figure_of(runs, o->repeat, offsetof(bench_run, floor_cpu_crier_us));
    bench_figure f_server = bench_figure_of(runs, o->repeat, offsetof(bench_run, floor_cpu_server_us));
    double ratio = http.med / floor_.med;
    /* What the CPU per delivery allows on this machine's cores, were every
     * core busy all the time: the throughput's ceiling, before any waiting. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double cpu_total = c_crier.med + c_recv.med + c_server.med;
    double ceiling = cpus > 0 && cpu_total > 0 ? (double)cpus * 1e6 / cpu_total : NAN;
    double floor_total = f_crier.med + f_server.med;
    double floor_ceiling = cpus > 0 && floor_total > 0 ? (double)cpus * 1e6 / floor_total : NAN;

    if (o->json) {
        printf("{");
        json_number("deliveries_per_s", http.med, 0, true);
        json_number("floor_per_s", floor_.med, 0, true);
        json_number("ratio", ratio, 3, true);
        json_number("p50_ms", p50.med, 2, true);
        json_number("p99_ms", p99.med, 2, true);
        json_number("max_ms", pmax.med, 2, true);
        json_number("receiver_per_s", recv.med, 0, true);
        json_number("deliveries_per_s_min", http.lo, 0, true);
        json_number("deliveries_per_s_max", http.hi, 0, true);
        json_number("floor_per_s_min", floor_.lo, 0, true);
        json_number("floor_per_s_max", floor_.hi, 0, true);
        json_number("p50_ms_min", p50.lo, 2, true);
        json_number("p50_ms_max", p50.hi, 2, true);
        json_number("p99_ms_min", p99.lo, 2, true);
        json_number("p99_ms_max", p99.hi, 2, true);
        json_number("deliveries_spread_pct", http.spread_pct, 1, true);
        json_number("floor_spread_pct", floor_.spread_pct, 1, true);
        json_number("p99_spread_pct", p99.spread_pct, 1, true);
        for (int i = 0; i < 3; i++) {
            char name[64];
            snprintf(name, sizeof name, "stage_%s_p50_ms", stages[i].name);
            json_number(name, stage_p50[i].med, 2, true);
            snprintf(name, sizeof name, "stage_%s_p99_ms", stages[i].name);
            json_number(name, stage_p99[i].med, 2, true);
        }
        json_number("rate", o->seconds > 0 ? o->rate : NAN, 0, true);
        json_number("emit_per_s", emit.med, 0, true);
        printf("\"emit_connections\": %d, ", o->emit_connections);
        json_number("load_avg", load.med, 2, true);
        json_number("cpu_us_crier", c_crier.med, 1, true);
        json_number("cpu_us_receiver", c_recv.med, 1, true);
        json_number("cpu_us_server", c_server.med, 1, true);
        json_number("cpu_us_total", cpu_total, 1, true);
        json_number("cpu_ceiling_per_s", ceiling, 0, true);
        json_number("floor_cpu_us_crier", f_crier.med, 1, true);
        json_number("floor_cpu_us_server", f_server.med, 1, true);
        json_number("floor_cpu_ceiling_per_s", floor_ceiling, 0, true);
        printf("\"cpus\": %ld, ", cpus);
        printf("\"deliveries\": %ld, \"recipients\": %d, \"latency_events\": %ld, \"runs\": %d}\n",
               deliveries, o->recipients, latency_events, o->repeat);
        return;
    }
    printf("deliveries_per_s: %.0f (min %.0f, max %.0f, spread %.1f%%)\n", http.med, http.lo,
           http.hi, http.spread_pct);
    printf("floor_per_s: %.0f (min %.0f, max %.0f, spread %.1f%%)\n", floor_.med, floor_.lo,
           floor_.hi, floor_.spread_pct);
    printf("ratio: %.3f (deliveries_per_s / floor_per_s)\n", ratio);
    printf("receiver_per_s: %.0f (min %.0f, max %.0f)\n", recv.med, recv.lo, recv.hi);
    printf("cpu_us per delivery: crier %.1f, receiver %.1f, server %.1f, total %.1f"
           " (medians; server: every PostgreSQL process, n/a unless local)\n",
           c_crier.med, c_recv.med, c_server.med, cpu_total);
    printf("cpu_ceiling_per_s: %.0f (%ld CPUs x 1e6 / total: the rate were every core busy)\n", ceiling, cpus);
    printf("floor cpu_us per delivery: engine %.1f, server %.1f; ceiling %.0f/s\n", f_crier.med, f_server.med,
           floor_ceiling);
    if (o->seconds > 0) {
        printf("p50_ms: %.2f (min %.2f, max %.2f)\n", p50.med, p50.lo, p50.hi);
        printf("p99_ms: %.2f (min %.2f, max %.2f, spread %.1f%%)\n", p99.med, p99.lo, p99.hi,
               p99.spread_pct);
        printf("max_ms: %.2f (min %.2f, max %.2f)\n", pmax.med, pmax.lo, pmax.hi);
        printf("stages p50/p99 ms (medians; each stage alone): to_fanout %.2f/%.2f (commit -> the fan-out "
               "batch's start), to_send %.2f/%.2f (-> the send's start), http %.2f/%.2f (-> the answer)\n",
               stage_p50[0].med, stage_p99[0].med, stage_p50[1].med, stage_p99[1].med, stage_p50[2].med,
               stage_p99[2].med);
        printf("emit_per_s: %.0f (asked %d)\n", emit.med, o->rate);
    }
    printf("deliveries: %ld\nrecipients: %d\nlatency_events: %ld\nruns: %d\n", deliveries,
           o->recipients, latency_events, o->repeat);
    printf("load_avg: %.2f (min %.2f, max %.2f; 1-minute load average after each run, %ld CPUs)\n",
           load.med, load.lo, load.hi, sysconf(_SC_NPROCESSORS_ONLN));
}

static int bench_option(void *ud, int opt, const char *arg)
{
    bench_opts *o = ud;
    char *end;
    long v;

    switch (opt) {
    case 'd':
        return crier_cli_positive_int("bench", "deliveries", arg, 100000000, &o->deliveries);
    case 'r':
        return crier_cli_positive_int("bench", "recipients", arg, 10000, &o->recipients);
    case 'R':
        return crier_cli_positive_int("bench", "rate", arg, 1000000, &o->rate);
    case 'n':
        return crier_cli_positive_int("bench", "repeat", arg, 1000, &o->repeat);
    case 'b':
        return crier_cli_positive_int("bench", "delivery-batch", arg, 100000, &o->delivery_batch);
    case 'i':
        return crier_cli_positive_int("bench", "max-inflight", arg, 100000, &o->max_inflight);
    case 's':
        v = strtol(arg, &end, 10);
        if (*arg == '\0' || *end != '\0' || v < 0 || v > 86400) {
            crier_cli_error("bench", "--seconds expects a whole number from 0 to 86400, got '%s'",
                            arg);
            return -1;
        }
        o->seconds = (int)v;
        return 0;
    case 'c':
        return crier_cli_positive_int("bench", "emit-connections", arg, 1000, &o->emit_connections);
    case 'x':
        o->nginx = arg;
        return 0;
    case 'k':
        o->keep = true;
        return 0;
    case 'j':
        o->json = true;
        return 0;
    }
    return -1;
}

int crier_bench_deliver(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"deliveries", required_argument, NULL, 'd'},
                                            {"recipients", required_argument, NULL, 'r'},
                                            {"rate", required_argument, NULL, 'R'},
                                            {"seconds", required_argument, NULL, 's'},
                                            {"repeat", required_argument, NULL, 'n'},
                                            {"delivery-batch", required_argument, NULL, 'b'},
                                            {"max-inflight", required_argument, NULL, 'i'},
                                            {"emit-connections", required_argument, NULL, 'c'},
                                            {"nginx", required_argument, NULL, 'x'},
                                            {"keep", no_argument, NULL, 'k'},
                                            {"json", no_argument, NULL, 'j'},
                                            {NULL, 0, NULL, 0}};
    bench_ctx b;
    crier_database db = {0};
    bench_run *runs = NULL;
    long events, deliveries, latency_events;
    int rc = 2;

    memset(&b, 0, sizeof b);
    b.o = (bench_opts){100000, 10, 500, 10, 1, 0, 0, 8, "/usr/sbin/nginx", false, false};
    crier_cli_init(&b.cli);
    if (crier_cli_parse(&b.cli, bench_deliver_help, argc, argv, options, bench_option, &b.o, &rc))
        goto out;
    if (optind < argc) {
        crier_cli_error("bench", "unexpected argument '%s' (see crier bench deliver --help)",
                        argv[optind]);
        goto out;
    }
    rc = 1;
    if (access(b.o.nginx, X_OK) < 0) {
        crier_cli_error("bench", "cannot run %s (%s): install Debian's nginx or pass --nginx PATH",
                        b.o.nginx, strerror(errno));
        goto out;
    }
    /* The in-process engine's info lines would drown the figures. */
    if (!getenv("CRIER_LOG"))
        crier_log_set_level(CRIER_LOG_WARN);
    events = (b.o.deliveries + b.o.recipients - 1) / b.o.recipients;
    deliveries = events * b.o.recipients;
    latency_events = (long)b.o.rate * b.o.seconds;

    if (bench_open_database(&b, &db) < 0)
        goto out;
    snprintf(b.dir, sizeof b.dir, "%s/crier-bench-deliver.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(b.dir)) {
        crier_cli_error("bench", "cannot create a work directory %s: %s", b.dir, strerror(errno));
        b.dir[0] = '\0';
        goto out;
    }
    b.port = crier_bench_free_port();
    if (!b.port) {
        crier_cli_error("bench", "no free TCP port on 127.0.0.1");
        goto out;
    }
    if (bench_write_rules(&b) < 0 || bench_nginx_config(&b) < 0)
        goto out;
    runs = crier_xcalloc((size_t)b.o.repeat, sizeof *runs);
    if (!b.o.json) {
        fprintf(stderr,
                "bench deliver: %ld deliveries (%ld events x %d recipients) to nginx on "
                "127.0.0.1:%d; ",
                deliveries, events, b.o.recipients, b.port);
        if (latency_events > 0)
            fprintf(stderr, "latency: %d events/s for %d s over %d connections; ", b.o.rate,
                    b.o.seconds, b.o.emit_connections);
        fprintf(stderr, "%d runs; work directory %s\n", b.o.repeat, b.dir);
    }
    for (int i = 0; i < b.o.repeat; i++) {
        bench_run *r = &runs[i];
        r->http_per_s = r->receiver_per_s = r->floor_per_s = NAN;
        r->cpu_crier_us = r->cpu_receiver_us = r->cpu_server_us = NAN;
        r->floor_cpu_crier_us = r->floor_cpu_server_us = NAN;
        r->p50_ms = r->p99_ms = r->max_ms = r->emit_per_s = NAN;
        r->to_fanout_p50 = r->to_fanout_p99 = r->to_send_p50 = r->to_send_p99 = r->http_p50 = r->http_p99 = NAN;
        if (bench_preload(&b, events) < 0)
            goto out;
        /* Alternate the order so that neither side always runs on a warmer cache. */
        if (i % 2 == 0 ? bench_phase_http(&b, deliveries, r) < 0 ||
                             bench_phase_floor(&b, deliveries, r) < 0
                       : bench_phase_floor(&b, deliveries, r) < 0 ||
                             bench_phase_http(&b, deliveries, r) < 0)
            goto out;
        if (latency_events > 0 && bench_phase_latency(&b, r) < 0)
            goto out;
        r->load = crier_bench_load();
        if (!b.o.json) {
            fprintf(stderr,
                    "  run %d: %.0f deliveries/s (receiver %.0f/s, %ld connections), floor %.0f/s, "
                    "ratio %.3f",
                    i + 1, r->http_per_s, r->receiver_per_s, r->connections, r->floor_per_s,
                    r->http_per_s / r->floor_per_s);
            if (latency_events > 0)
                fprintf(stderr,
                        "; latency p50 %.2f ms, p99 %.2f ms, max %.2f ms at %.0f events/s (p50/p99 ms: to "
                        "fan-out %.2f/%.2f, to send %.2f/%.2f, http %.2f/%.2f)",
                        r->p50_ms, r->p99_ms, r->max_ms, r->emit_per_s, r->to_fanout_p50, r->to_fanout_p99,
                        r->to_send_p50, r->to_send_p99, r->http_p50, r->http_p99);
            fprintf(stderr, "; load %.1f\n", r->load);
        }
    }
    bench_report(&b.o, runs, deliveries, latency_events);
    rc = 0;
out:
    crier_bench_stop_child(&b.serve_pid, 15);
    crier_bench_stop_child(&b.nginx_pid, 10);
    if (b.conn) {
        if (rc == 0)
            crier_bench_exec(b.conn, "DROP SCHEMA IF EXISTS crier_bench_deliver CASCADE");
        PQfinish(b.conn);
    }
    if (b.dir[0]) {
        if (rc == 0 && !b.o.keep)
            crier_bench_rm_tree(b.dir);
        else
            fprintf(stderr, "crier bench: work directory kept: %s\n", b.dir);
    }
    free(runs);
    crier_database_close(&db);
    crier_cli_free(&b.cli);
    return rc;
}
