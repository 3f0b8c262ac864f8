/* bench_pipeline.c — `crier bench pipeline`: the whole fan-out pipeline of the
 * real daemon (claim, advisory locks, rules, keys, notification and delivery
 * rows, events marked done) against a raw COPY of exactly the rows it produced
 * into identical tables, in the same run, with 1 and 2 workers; and the share
 * of the server's time per statement (pg_stat_statements).
 *
 * Per run and worker count W:
 *   1. N events of K recipients are emitted (crier.emit), then VACUUM ANALYZE
 *      and CHECKPOINT, and the statement statistics are reset;
 *   2. W `crier serve --exit-when-idle --no-deliver` processes (this binary)
 *      fan them out; deliveries stay pending (parked, not sent) — or, with
 *      --send, the same serves send them to a local HTTP receiver;
 *   3. crier_rows_per_s: notification + delivery rows of the events whose batch
 *      started before the last batch, divided by the time from the first
 *      batch's start to the last batch's start (events.processed_at is now()
 *      of each batch's transaction), so that process start-up is not counted;
 *   4. the rows are read back (outside the timing) and, after a checkpoint,
 *      COPYed in one transaction into tables made LIKE crier.notifications and
 *      crier.deliveries INCLUDING ALL (same columns, defaults, indexes, checks;
 *      no foreign keys), with the same storage parameters and triggers:
 *      copy_rows_per_s;
 *   5. pg_stat_statements gives each statement's share of the server's time.
 * By default the bench runs its own private cluster (default durability) in
 * its work directory, started with shared_preload_libraries =
 * pg_stat_statements; --database uses an existing database instead (shares
 * only if pg_stat_statements is loaded there). */
#define _GNU_SOURCE
#include "bench.h"
#include "alloc.h"
#include "bench_util.h"
#include "cli.h"
#include "clock.h"
#include "http_sink.h"
#include "log.h"
#include "pg_cluster.h"

#include <errno.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char bench_pipeline_help[] =
    "usage: crier bench pipeline [--events N] [--recipients K] [--workers LIST] [--repeat R]\n"
    "                            [--batch-size B] [--fanout-connections C] [--copy-min M]\n"
    "                            [--rule-loop L] [--send] [--keep] [--json]\n"
    "                            [--database URL] [--lua-dir DIR]\n"
    "\n"
    "Emits N events of K recipients (one webhook each) and lets W `crier serve\n"
    "--exit-when-idle --no-deliver` processes fan them out (rules, claim, locks,\n"
    "keys, notification and delivery rows, events done; deliveries parked, not\n"
    "sent), for each W in LIST; then COPYs exactly the rows they produced into\n"
    "identical tables (LIKE … INCLUDING ALL, the same storage parameters and\n"
    "triggers; no foreign keys) in one transaction.\n"
    "Prints crier_rows_per_s (notification + delivery rows per second of fan-out),\n"
    "copy_rows_per_s, their ratio, crier_cpu_us_per_row (the serves' own CPU\n"
    "time per row) and each statement's share of the server's time\n"
    "(pg_stat_statements). --send lets the serves also send every delivery to a\n"
    "local HTTP receiver and adds deliveries/s. Repeats R times (the worker counts\n"
    "alternate their order), prints medians, min/max and the spread\n"
    "((max - min) / median). --json prints one object.\n"
    "Runs a private cluster (default durability) in a temporary work directory,\n"
    "with pg_stat_statements loaded; --database URL uses that database instead\n"
    "(its crier tables are EMPTIED; refused if they hold another tenant's events);\n"
    "CRIER_DATABASE_URL is ignored.\n"
    "--keep keeps the work directory (serve logs, rules).\n"
    "--batch-size, --fanout-connections and --copy-min are passed to each crier serve\n"
    "(--copy-min 100000000: rows through the write statement, never by COPY).\n"
    "--rule-loop L: the rule's recipients function first runs a Lua loop of L\n"
    "iterations (a rule that costs CPU: planning, not the database, is then the\n"
    "bound; about 20 us per 1,000 iterations).\n"
    "Defaults: N=20000, K=5, LIST=1,2, R=3, L=0, B, C and M: serve's defaults.\n";

#define BENCH_TENANT "bench"
#define BENCH_TYPE "bench.fan"
#define MAX_WORKER_COUNTS 4
#define MAX_WORKERS 8
#define MAX_STATEMENTS 12

typedef struct {
    int events, recipients, repeat, batch_size, fanout_connections, copy_min, rule_loop;
    int workers[MAX_WORKER_COUNTS];
    int n_workers;
    bool send, json, keep;
} bench_opts;

/* One statement's time over the runs of one worker count. */
typedef struct {
    char query[96];
    double calls, total_ms;
} bench_statement;

/* Figures of one worker count over the runs. */
typedef struct {
    double *crier, *copy, *ratio, *delivered, *db_busy;
    double *cpu; /* the serves' CPU time (user + system) per row, µs */
    double slowed; /* events the serves handed to their slow lane, all runs */
    bench_statement st[MAX_STATEMENTS * 4];
    int n_st;
    double all_ms; /* the server's time over every statement, all runs */
} bench_series;

typedef struct {
    bench_opts o;
    crier_cli cli;
    char dir[256];
    char rules_dir[300];
    char data_dir[300];
    char conninfo[2400];
    PGconn *conn;
    bool stats; /* pg_stat_statements works */
    crier_http_sink *sink;
    pid_t pids[MAX_WORKERS];
    int n_logs;
    double serve_cpu_s; /* CPU time of the serves of the current run */
} bench_ctx;

static int bench_write_rules(bench_ctx *b, unsigned port)
{
    char path[400], text[2048];
    snprintf(b->rules_dir, sizeof b->rules_dir, "%s/rules", b->dir);
    if (mkdir(b->rules_dir, 0755) < 0) {
        crier_cli_error("bench", "cannot create %s: %s", b->rules_dir, strerror(errno));
        return -1;
    }
    snprintf(text, sizeof text,
             "-- Generated by crier bench pipeline: payload.n recipients per event, each\n"
             "-- one webhook (the default body).\n"
             "local crier = require \"crier\"\n"
             "\n"
             "crier.event_type \"" BENCH_TYPE "\" {\n"
             "    description = \"crier bench pipeline\",\n"
             "    payload = { n = \"integer\" },\n"
             "}\n"
             "\n"
             "crier.rule \"" BENCH_TYPE "\" {\n"
             "    recipients = function(event)\n"
             "        local x = 0\n"
             "        for i = 1, %d do x = (x * 31 + i) %% 1000003 end -- --rule-loop\n"
             "        local list = {}\n"
             "        for i = 1, event.payload.n do\n"
             "            list[i] = \"r\" .. (i - 1)\n"
             "        end\n"
             "        return list\n"
             "    end,\n"
             "    channels = { \"webhook\" },\n"
             "    webhook = { url = \"http://127.0.0.1:%u/hooks/bench\" },\n"
             "}\n",
             b->o.rule_loop, port);
    snprintf(path, sizeof path, "%s/bench.lua", b->rules_dir);
    return crier_bench_write_file(path, text);
}

/* What LIKE … INCLUDING ALL leaves out, so that the baseline's tables are the
 * ones crier writes: their storage parameters (crier.deliveries has
 * fillfactor 50, sql/029, which COPY pays in pages) and their triggers (COPY
 * evaluates the WHEN clause of each AFTER ROW INSERT trigger for every row;
 * for these rows it is false, so no trigger function runs). */
static const char SQL_SAME_STORAGE_AND_TRIGGERS[] =
    "DO $$ DECLARE r record; BEGIN"
    " FOR r IN SELECT c.relname, o.opt FROM pg_class c, unnest(c.reloptions) AS o(opt)"
    "   WHERE c.oid IN ('crier.notifications'::regclass, 'crier.deliveries'::regclass) LOOP"
    "   EXECUTE format('ALTER TABLE crier_bench_pipeline.%I SET (%s)', r.relname, r.opt);"
    " END LOOP;"
    " FOR r IN SELECT c.relname, pg_get_triggerdef(t.oid) AS def FROM pg_trigger t"
    "   JOIN pg_class c ON c.oid = t.tgrelid"
    "   WHERE c.oid IN ('crier.notifications'::regclass, 'crier.deliveries'::regclass) AND NOT t.tgisinternal LOOP"
    "   EXECUTE replace(r.def, ' ON crier.' || r.relname || ' ', ' ON crier_bench_pipeline.' || r.relname || ' ');"
    " END LOOP;"
    " END $$";

/* Starts the private cluster with pg_stat_statements preloaded: initdb and
 * start, ALTER SYSTEM, stop (crier_bench_open_database starts it again).
 * Returns 0 or -1 (message printed). */
static int bench_private_cluster(bench_ctx *b)
{
    char conninfo[2048], err[4096];
    crier_pg_cluster_options opts = {.fast = false, .max_connections = 0};
    PGconn *c;
    int ok;

    snprintf(b->data_dir, sizeof b->data_dir, "%s/pg", b->dir);
    /* the server may run as another user (postgres, when we are root): it must
     * traverse the work directory */
    if (chmod(b->dir, 0711) < 0) {
        crier_cli_error("bench", "cannot chmod %s: %s", b->dir, strerror(errno));
        return -1;
    }
    if (crier_pg_cluster_start(b->data_dir, &opts, conninfo, sizeof conninfo, err, sizeof err) < 0) {
        crier_cli_error("bench", "%s", err);
        return -1;
    }
    c = PQconnectdb(conninfo);
    ok = PQstatus(c) == CONNECTION_OK &&
         crier_bench_exec(c, "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'") == 0;
    if (!ok)
        crier_cli_error("bench", "cannot configure the private cluster: %s", PQerrorMessage(c));
    PQfinish(c);
    if (crier_pg_cluster_stop(b->data_dir, err, sizeof err) < 0) {
        crier_cli_error("bench", "%s", err);
        return -1;
    }
    return ok ? 0 : -1;
}

/* Empties crier's tables and the copy tables. */
static int bench_reset(bench_ctx *b)
{
    return crier_bench_exec(b->conn, "TRUNCATE crier.events, crier.notifications, crier.deliveries,"
                                     " crier.delivery_attempts, crier_bench_pipeline.notifications,"
                                     " crier_bench_pipeline.deliveries RESTART IDENTITY CASCADE");
}

/* Starts w serves and waits for all of them to exit. Returns 0 or -1. */
static int bench_run_serves(bench_ctx *b, int w)
{
    char logs[MAX_WORKERS][400], batch[16], conns[16], copy_min[16];
    int rc = 0;

    snprintf(batch, sizeof batch, "%d", b->o.batch_size);
    snprintf(conns, sizeof conns, "%d", b->o.fanout_connections);
    snprintf(copy_min, sizeof copy_min, "%d", b->o.copy_min);
    for (int i = 0; i < w; i++) {
        char *argv[24];
        int n = crier_bench_serve_argv(argv, b->conninfo, b->rules_dir, b->cli.lua_dir);
        argv[n++] = "--exit-when-idle";
        if (!b->o.send)
            argv[n++] = "--no-deliver";
        if (b->o.batch_size > 0) {
            argv[n++] = "--batch-size";
            argv[n++] = batch;
        }
        if (b->o.fanout_connections > 0) {
            argv[n++] = "--fanout-connections";
            argv[n++] = conns;
        }
        if (b->o.copy_min > 0) {
            argv[n++] = "--copy-min";
            argv[n++] = copy_min;
        }
        argv[n] = NULL;
        snprintf(logs[i], sizeof logs[i], "%s/serve-%d.log", b->dir, ++b->n_logs);
        b->pids[i] = crier_bench_spawn(argv, logs[i]);
        if (b->pids[i] < 0) {
            b->pids[i] = 0;
            rc = -1;
        }
    }
    double timeout = 120 + (double)b->o.events * b->o.recipients / 500;
    for (int i = 0; i < w; i++) {
        if (!b->pids[i])
            continue;
        int st = crier_bench_wait_cpu(b->pids[i], timeout, &b->serve_cpu_s);
        if (st < 0)
            st = crier_bench_stop_child(&b->pids[i], 15);
        b->pids[i] = 0;
        if (st != 0) {
            crier_cli_error("bench", "crier serve (worker %d of %d) exited with status %d", i + 1, w, st);
            crier_bench_print_tail(logs[i]);
            rc = -1;
        }
    }
    return rc;
}

/* Reads `COPY (query) TO STDOUT` into a new buffer (caller frees). */
static char *bench_copy_out(PGconn *conn, const char *query, size_t *len)
{
    char sql[512];
    size_t n = 0, cap = 1 << 20;
    char *buf = crier_xmalloc(cap), *row;
    int r;

    snprintf(sql, sizeof sql, "COPY (%s) TO STDOUT", query);
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_COPY_OUT) {
        crier_cli_error("bench", "%s: %s", sql, PQresultErrorMessage(res));
        PQclear(res);
        free(buf);
        return NULL;
    }
    PQclear(res);
    while ((r = PQgetCopyData(conn, &row, 0)) > 0) {
        if (n + (size_t)r > cap) {
            while (n + (size_t)r > cap)
                cap *= 2;
            buf = crier_xrealloc(buf, cap);
        }
        memcpy(buf + n, row, (size_t)r);
        n += (size_t)r;
        PQfreemem(row);
    }
    while ((res = PQgetResult(conn)) != NULL) {
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            crier_cli_error("bench", "%s: %s", sql, PQresultErrorMessage(res));
        PQclear(res);
    }
    *len = n;
    return buf;
}

static int bench_copy_in(PGconn *conn, const char *table, const char *text, size_t len)
{
    char sql[256];
    snprintf(sql, sizeof sql, "COPY %s FROM STDIN", table);
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_COPY_IN) {
        crier_cli_error("bench", "%s: %s", sql, PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    PQclear(res);
    for (size_t off = 0; off < len; off += 1 << 20) {
        size_t chunk = len - off < (1u << 20) ? len - off : (1u << 20);
        if (PQputCopyData(conn, text + off, (int)chunk) != 1)
            goto fail;
    }
    if (PQputCopyEnd(conn, NULL) != 1)
        goto fail;
    int ok = 1;
    while ((res = PQgetResult(conn)) != NULL) {
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            crier_cli_error("bench", "%s: %s", sql, PQresultErrorMessage(res));
            ok = 0;
        }
        PQclear(res);
    }
    return ok ? 0 : -1;
fail:
    crier_cli_error("bench", "%s: %s", sql, PQerrorMessage(conn));
    return -1;
}

/* COPYs the rows crier produced into the copy tables: rows/s, or -1. */
static double bench_copy_phase(bench_ctx *b, double rows)
{
    size_t n_len = 0, d_len = 0;
    char *n_text = bench_copy_out(b->conn, "SELECT * FROM crier.notifications ORDER BY id", &n_len);
    char *d_text = bench_copy_out(b->conn, "SELECT * FROM crier.deliveries ORDER BY id", &d_len);
    double rate = -1, t0;

    if (!n_text || !d_text || crier_bench_exec(b->conn, "CHECKPOINT") < 0)
        goto out;
    t0 = crier_clock_s();
    if (crier_bench_exec(b->conn, "BEGIN") < 0 ||
        bench_copy_in(b->conn, "crier_bench_pipeline.notifications", n_text, n_len) < 0 ||
        bench_copy_in(b->conn, "crier_bench_pipeline.deliveries", d_text, d_len) < 0 ||
        crier_bench_exec(b->conn, "COMMIT") < 0)
        goto out;
    rate = rows / (crier_clock_s() - t0);
out:
    free(n_text);
    free(d_text);
    return rate;
}

/* Adds this run's pg_stat_statements rows to the series. */
static int bench_collect_statements(bench_ctx *b, bench_series *s)
{
    PGresult *res = PQexec(b->conn,
                           "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 90), calls, total_exec_time"
                           " FROM pg_stat_statements"
                           " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                           "   AND query NOT LIKE '%pg_stat_statements%'"
                           " ORDER BY total_exec_time DESC");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        crier_cli_error("bench", "pg_stat_statements: %s", PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        const char *q = PQgetvalue(res, i, 0);
        double calls = atof(PQgetvalue(res, i, 1)), ms = atof(PQgetvalue(res, i, 2));
        int j;
        s->all_ms += ms;
        for (j = 0; j < s->n_st; j++)
            if (!strncmp(s->st[j].query, q, sizeof s->st[j].query - 1))
                break;
        if (j == s->n_st) {
            if (s->n_st == (int)(sizeof s->st / sizeof s->st[0]))
                continue;
            snprintf(s->st[s->n_st++].query, sizeof s->st[0].query, "%s", q);
        }
        s->st[j].calls += calls;
        s->st[j].total_ms += ms;
    }
    PQclear(res);
    return 0;
}

/* One run of w workers. Fills crier/copy/ratio/delivered/db_busy at index i. */
static int bench_run(bench_ctx *b, int w, bench_series *s, int i)
{
    char sql[512];
    double v[6];
    long rows = (long)b->o.events * b->o.recipients;

    snprintf(sql, sizeof sql,
             "SELECT count(crier.emit('" BENCH_TENANT "', '" BENCH_TYPE "', 'e' || g,"
             " jsonb_build_object('n', %d))) FROM generate_series(1, %d) g",
             b->o.recipients, b->o.events);
    if (bench_reset(b) < 0 || crier_bench_exec(b->conn, sql) < 0 ||
        crier_bench_exec(b->conn, "VACUUM ANALYZE crier.events") < 0 ||
        crier_bench_exec(b->conn, "CHECKPOINT") < 0)
        return -1;
    if (b->stats && crier_bench_exec(b->conn, "SELECT pg_stat_statements_reset()") < 0)
        return -1;
    b->serve_cpu_s = 0;
    if (bench_run_serves(b, w) < 0)
        return -1;
    s->cpu[i] = b->serve_cpu_s * 1e6 / (2.0 * (double)rows);
    /* the serves' statements, before the bench's own queries below */
    double before_ms = s->all_ms;
    if (b->stats && bench_collect_statements(b, s) < 0)
        return -1;
    if (crier_bench_query_numbers(
            b->conn,
            "SELECT (SELECT count(*) FROM crier.events WHERE state = 'done'),"
            " (SELECT count(*) FROM crier.notifications), (SELECT count(*) FROM crier.deliveries),"
            " (SELECT count(*) FROM crier.deliveries WHERE state = 'delivered'),"
            " (SELECT count(*) FROM crier.deliveries WHERE state = 'pending'),"
            " (SELECT count(*) FROM crier.events WHERE lane = 1)",
            v, 6) < 0)
        return -1;
    /* a rule that ran past serve's --slow-rule (a busy machine can stall a
     * process that long) sends its type to the slow lane's small batches */
    s->slowed += v[5];
    if ((long)v[0] != b->o.events || (long)v[1] != rows || (long)v[2] != rows ||
        (long)(b->o.send ? v[3] : v[4]) != rows) {
        crier_cli_error("bench",
                        "expected %d events done, %ld notifications and %ld %s deliveries; got %.0f, %.0f, "
                        "%.0f (%.0f delivered, %.0f pending)",
                        b->o.events, rows, rows, b->o.send ? "delivered" : "pending", v[0], v[1], v[2], v[3],
                        v[4]);
        return -1;
    }
    /* rows of the events whose batch started before the last batch, over the
     * time from the first batch's start to the last one's */
    if (crier_bench_query_numbers(
            b->conn,
            "WITH m AS (SELECT min(processed_at) AS lo, max(processed_at) AS hi FROM crier.events)"
            " SELECT (SELECT count(*) FROM crier.notifications n JOIN crier.events e ON e.id = n.event_id, m"
            "         WHERE e.processed_at < m.hi)"
            "      + (SELECT count(*) FROM crier.deliveries d JOIN crier.notifications n"
            "         ON n.id = d.notification_id JOIN crier.events e ON e.id = n.event_id, m"
            "         WHERE e.processed_at < m.hi),"
            " (SELECT extract(epoch FROM hi - lo) FROM m),"
            " (SELECT extract(epoch FROM max(delivered_at) - min(delivered_at)) FROM crier.deliveries),"
            " (SELECT count(*) FROM crier.deliveries, (SELECT min(delivered_at) AS lo FROM crier.deliveries) f"
            "   WHERE delivered_at = f.lo)",
            v, 4) < 0)
        return -1;
    if (!(v[1] > 0) || v[0] < 1) {
        crier_cli_error("bench", "all events were fanned out in one batch: too few to time (raise --events)");
        return -1;
    }
    s->crier[i] = v[0] / v[1];
    s->delivered[i] = b->o.send && v[2] > 0 ? ((double)rows - v[3]) / v[2] : NAN;
    s->db_busy[i] = NAN;
    if (b->stats) /* the server's time in statements over the fan-out's wall time, per worker */
        s->db_busy[i] = (s->all_ms - before_ms) / 1000.0 / (v[1] * w);
    s->copy[i] = bench_copy_phase(b, 2.0 * (double)rows);
    if (s->copy[i] < 0)
        return -1;
    s->ratio[i] = s->crier[i] / s->copy[i];
    return 0;
}

typedef struct {
    double med, lo, hi, spread;
} figure;

static figure figure_of(const double *v, int n)
{
    figure f;
    crier_bench_stats(v, n, &f.med, &f.lo, &f.hi);
    f.spread = f.med > 0 ? 100.0 * (f.hi - f.lo) / f.med : NAN;
    return f;
}

static int cmp_statement(const void *a, const void *b)
{
    double x = ((const bench_statement *)a)->total_ms, y = ((const bench_statement *)b)->total_ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static void json_num(const char *name, double v, int decimals)
{
    if (isnan(v))
        printf("\"%s\": null, ", name);
    else
        printf("\"%s\": %.*f, ", name, decimals, v);
}

static void bench_report(const bench_ctx *b, bench_series *series, double load)
{
    const bench_opts *o = &b->o;
    if (o->json)
        printf("{\"mode\": \"%s\", \"events\": %d, \"recipients\": %d, \"rows\": %ld, \"runs\": %d, ",
               o->send ? "send" : "parked", o->events, o->recipients, 2L * o->events * o->recipients, o->repeat);
    for (int k = 0; k < o->n_workers; k++) {
        bench_series *s = &series[k];
        figure c = figure_of(s->crier, o->repeat), p = figure_of(s->copy, o->repeat);
        figure r = figure_of(s->ratio, o->repeat), d = figure_of(s->delivered, o->repeat);
        figure busy = figure_of(s->db_busy, o->repeat);
        figure cpu = figure_of(s->cpu, o->repeat);
        qsort(s->st, (size_t)s->n_st, sizeof s->st[0], cmp_statement);
        int shown = s->n_st < 8 ? s->n_st : 8;
        if (o->json) {
            if (k == 0) { /* the headline figures: the first worker count (1 by default) */
                json_num("crier_rows_per_s", c.med, 0);
                json_num("copy_rows_per_s", p.med, 0);
                json_num("ratio", r.med, 3);
                printf("\"by_workers\": [");
            }
            printf("%s{\"workers\": %d, ", k ? ", " : "", o->workers[k]);
            json_num("crier_rows_per_s", c.med, 0);
            json_num("crier_rows_per_s_min", c.lo, 0);
            json_num("crier_rows_per_s_max", c.hi, 0);
            json_num("crier_spread_pct", c.spread, 1);
            json_num("copy_rows_per_s", p.med, 0);
            json_num("copy_rows_per_s_min", p.lo, 0);
            json_num("copy_rows_per_s_max", p.hi, 0);
            json_num("copy_spread_pct", p.spread, 1);
            json_num("ratio", r.med, 3);
            json_num("ratio_min", r.lo, 3);
            json_num("ratio_max", r.hi, 3);
            json_num("delivered_per_s", d.med, 0);
            json_num("db_busy_per_worker", busy.med, 3);
            json_num("crier_cpu_us_per_row", cpu.med, 2);
            json_num("slow_lane_events", s->slowed, 0);
            printf("\"statements\": [");
            for (int j = 0; j < shown; j++) {
                printf("%s{\"query\": ", j ? ", " : "");
                json_str(s->st[j].query);
                printf(", \"share\": %.3f, \"calls\": %.0f, \"mean_ms\": %.3f}",
                       s->all_ms > 0 ? s->st[j].total_ms / s->all_ms : 0, s->st[j].calls,
                       s->st[j].calls > 0 ? s->st[j].total_ms / s->st[j].calls : 0);
            }
            printf("]}");
            continue;
        }
        printf("workers: %d\n", o->workers[k]);
        printf("  crier_rows_per_s: %.0f (min %.0f, max %.0f, spread %.1f%%)\n", c.med, c.lo, c.hi, c.spread);
        printf("  copy_rows_per_s: %.0f (min %.0f, max %.0f, spread %.1f%%)\n", p.med, p.lo, p.hi, p.spread);
        printf("  ratio: %.3f (min %.3f, max %.3f; median of the runs' crier/COPY)\n", r.med, r.lo, r.hi);
        if (o->send)
            printf("  delivered_per_s: %.0f (min %.0f, max %.0f)\n", d.med, d.lo, d.hi);
        printf("  crier_cpu_us_per_row: %.2f (min %.2f, max %.2f; the serves' user + system CPU per row)\n",
               cpu.med, cpu.lo, cpu.hi);
        if (s->slowed > 0)
            printf("  slow_lane_events: %.0f (events whose rule ran past --slow-rule, batched by 10: "
                   "a busy machine)\n", s->slowed);
        if (b->stats) {
            printf("  db_busy_per_worker: %.2f (server time in statements / fan-out wall time / workers)\n",
                   busy.med);
            printf("  statements (share of the server's time, all runs):\n");
            for (int j = 0; j < shown; j++)
                printf("    %5.1f%%  %8.0f calls  %8.3f ms  %s\n",
                       s->all_ms > 0 ? 100.0 * s->st[j].total_ms / s->all_ms : 0, s->st[j].calls,
                       s->st[j].calls > 0 ? s->st[j].total_ms / s->st[j].calls : 0, s->st[j].query);
        }
    }
    if (o->json) {
        printf("], ");
        json_num("load_avg", load, 2);
        printf("\"statement_stats\": %s}\n", b->stats ? "true" : "false");
        return;
    }
    printf("rows: %ld (notifications + deliveries)\nruns: %d\nmode: %s\n", 2L * o->events * o->recipients,
           o->repeat, o->send ? "send" : "parked");
    printf("load_avg: %.2f (1-minute load average at the end, %ld CPUs)\n", load, sysconf(_SC_NPROCESSORS_ONLN));
}

static int parse_workers(bench_opts *o, const char *arg)
{
    char buf[64], *save = NULL;
    snprintf(buf, sizeof buf, "%s", arg);
    o->n_workers = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > MAX_WORKERS || o->n_workers == MAX_WORKER_COUNTS) {
            crier_cli_error("bench", "--workers expects up to %d counts from 1 to %d (e.g. 1,2), got '%s'",
                            MAX_WORKER_COUNTS, MAX_WORKERS, arg);
            return -1;
        }
        o->workers[o->n_workers++] = (int)v;
    }
    return o->n_workers ? 0 : -1;
}

static int bench_option(void *ud, int opt, const char *arg)
{
    bench_opts *o = ud;
    switch (opt) {
    case 'e': return crier_cli_positive_int("bench", "events", arg, 100000000, &o->events);
    case 'r': return crier_cli_positive_int("bench", "recipients", arg, 10000, &o->recipients);
    case 'n': return crier_cli_positive_int("bench", "repeat", arg, 1000, &o->repeat);
    case 'b': return crier_cli_positive_int("bench", "batch-size", arg, 100000, &o->batch_size);
    case 'w': return parse_workers(o, arg);
    case 'c': return crier_cli_positive_int("bench", "fanout-connections", arg, 8, &o->fanout_connections);
    case 'm': return crier_cli_positive_int("bench", "copy-min", arg, 100000000, &o->copy_min);
    case 'l': return crier_cli_positive_int("bench", "rule-loop", arg, 100000000, &o->rule_loop);
    case 's': o->send = true; return 0;
    case 'k': o->keep = true; return 0;
    case 'j': o->json = true; return 0;
    }
    return -1;
}

int crier_bench_pipeline(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"events", required_argument, NULL, 'e'},
                                            {"recipients", required_argument, NULL, 'r'},
                                            {"repeat", required_argument, NULL, 'n'},
                                            {"batch-size", required_argument, NULL, 'b'},
                                            {"workers", required_argument, NULL, 'w'},
                                            {"fanout-connections", required_argument, NULL, 'c'},
                                            {"copy-min", required_argument, NULL, 'm'},
                                            {"rule-loop", required_argument, NULL, 'l'},
                                            {"send", no_argument, NULL, 's'},
                                            {"keep", no_argument, NULL, 'k'},
                                            {"json", no_argument, NULL, 'j'},
                                            {NULL, 0, NULL, 0}};
    bench_ctx b;
    crier_database db = {0};
    bench_series series[MAX_WORKER_COUNTS];
    char err[512];
    bool fresh;
    int rc = 2;

    memset(&b, 0, sizeof b);
    memset(series, 0, sizeof series);
    b.o = (bench_opts){.events = 20000, .recipients = 5, .repeat = 3, .workers = {1, 2}, .n_workers = 2};
    crier_cli_init(&b.cli);
    if (crier_cli_parse(&b.cli, bench_pipeline_help, argc, argv, options, bench_option, &b.o, &rc))
        goto out;
    if (optind < argc) {
        crier_cli_error("bench", "unexpected argument '%s' (see crier bench pipeline --help)", argv[optind]);
        goto out;
    }
    rc = 1;
    if (!getenv("CRIER_LOG"))
        crier_log_set_level(CRIER_LOG_WARN);
    snprintf(b.dir, sizeof b.dir, "%s/crier-bench-pipeline.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(b.dir)) {
        crier_cli_error("bench", "cannot create a work directory %s: %s", b.dir, strerror(errno));
        b.dir[0] = '\0';
        goto out;
    }
    /* the private cluster unless --database: CRIER_DATABASE_URL does not count */
    unsetenv("CRIER_DATABASE_URL");
    if (!b.cli.database && bench_private_cluster(&b) < 0)
        goto out;
    if (crier_bench_open_database(b.cli.database, b.cli.database ? NULL : b.data_dir, &db, "crier_bench_pipeline",
                                  false, false, BENCH_TENANT, b.conninfo, sizeof b.conninfo, &b.conn, &fresh) < 0)
        goto out;
    /* pg_stat_statements, when the server loaded it */
    {
        PGresult *res = PQexec(b.conn, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        PQclear(res);
        res = PQexec(b.conn, "SELECT pg_stat_statements_reset()");
        b.stats = PQresultStatus(res) == PGRES_TUPLES_OK;
        PQclear(res);
        if (!b.stats && !b.o.json)
            fprintf(stderr, "bench pipeline: pg_stat_statements is not loaded on this server: no statement shares\n");
    }
    if (crier_bench_exec(b.conn, "DROP SCHEMA IF EXISTS crier_bench_pipeline CASCADE") < 0 ||
        crier_bench_exec(b.conn, "CREATE SCHEMA crier_bench_pipeline") < 0 ||
        crier_bench_exec(b.conn, "CREATE TABLE crier_bench_pipeline.notifications"
                                 " (LIKE crier.notifications INCLUDING ALL)") < 0 ||
        crier_bench_exec(b.conn, "CREATE TABLE crier_bench_pipeline.deliveries"
                                 " (LIKE crier.deliveries INCLUDING ALL)") < 0 ||
        crier_bench_exec(b.conn, SQL_SAME_STORAGE_AND_TRIGGERS) < 0)
        goto out;
    if (b.o.send) {
        b.sink = crier_http_sink_start(err, sizeof err);
        if (!b.sink) {
            crier_cli_error("bench", "cannot start the local receiver: %s", err);
            goto out;
        }
    }
    if (bench_write_rules(&b, b.sink ? crier_http_sink_port(b.sink) : 9) < 0)
        goto out;
    for (int k = 0; k < b.o.n_workers; k++) {
        bench_series *s = &series[k];
        s->crier = crier_xcalloc((size_t)b.o.repeat, sizeof(double));
        s->copy = crier_xcalloc((size_t)b.o.repeat, sizeof(double));
        s->ratio = crier_xcalloc((size_t)b.o.repeat, sizeof(double));
        s->delivered = crier_xcalloc((size_t)b.o.repeat, sizeof(double));
        s->db_busy = crier_xcalloc((size_t)b.o.repeat, sizeof(double));
        s->cpu = crier_xcalloc((size_t)b.o.repeat, sizeof(double));
    }
    if (!b.o.json)
        fprintf(stderr, "bench pipeline: %d events x %d recipients (%s), workers", b.o.events, b.o.recipients,
                b.o.send ? "sent to a local receiver" : "deliveries parked");
    for (int k = 0; k < b.o.n_workers && !b.o.json; k++)
        fprintf(stderr, " %d", b.o.workers[k]);
    if (!b.o.json)
        fprintf(stderr, ", %d runs; work directory %s\n", b.o.repeat, b.dir);
    for (int i = 0; i < b.o.repeat; i++) {
        for (int j = 0; j < b.o.n_workers; j++) {
            /* alternate the order of the worker counts from run to run */
            int k = i % 2 ? b.o.n_workers - 1 - j : j;
            bench_series *s = &series[k];
            if (bench_run(&b, b.o.workers[k], s, i) < 0)
                goto out;
            if (!b.o.json)
                fprintf(stderr, "  run %d, %d worker%s: crier %.0f rows/s, copy %.0f rows/s, ratio %.3f%s; load %.1f\n",
                        i + 1, b.o.workers[k], b.o.workers[k] > 1 ? "s" : "", s->crier[i], s->copy[i], s->ratio[i],
                        b.o.send ? "" : "", crier_bench_load());
        }
    }
    bench_report(&b, series, crier_bench_load());
    rc = 0;
out:
    for (int i = 0; i < MAX_WORKERS; i++)
        if (b.pids[i])
            crier_bench_stop_child(&b.pids[i], 5);
    crier_http_sink_stop(b.sink);
    if (b.conn) {
        if (rc == 0)
            crier_bench_exec(b.conn, "DROP SCHEMA IF EXISTS crier_bench_pipeline CASCADE");
        PQfinish(b.conn);
    }
    crier_database_close(&db);
    if (b.dir[0]) {
        if (rc == 0 && !b.o.keep)
            crier_bench_rm_tree(b.dir);
        else
            fprintf(stderr, "crier bench: work directory kept: %s\n", b.dir);
    }
    for (int k = 0; k < MAX_WORKER_COUNTS; k++) {
        free(series[k].crier);
        free(series[k].copy);
        free(series[k].ratio);
        free(series[k].delivered);
        free(series[k].db_busy);
        free(series[k].cpu);
    }
    crier_cli_free(&b.cli);
    return rc;
}
