/* bench_timers.c — `crier bench timers`: the time features under load, through
 * the real engine (crier_engine_run, as crier serve runs it, in a child
 * process; deliveries are parked at a paused endpoint and never sent), beside
 * a baseline measured in the same run.
 *
 * Part A, delays: N held deliveries with plain delay timers, all due within
 * one second (the rows crier.apply_timing makes, built in SQL); the engine's
 * timer worker fires them. Lateness = fired_at - due_at per timer (p50, p99,
 * max) and the firing rate, beside the SQL floor: the same claim statement
 * (FOR UPDATE SKIP LOCKED, the worker's batch size) and the same row changes
 * (delivery held -> pending, timer -> fired with its outcome), one plain
 * statement per batch, one transaction per batch, from this process.
 *
 * Part B, digests: E events for R recipients x K digest keys (R x K digests),
 * fanned out by the engine with a digest rule and, beside it, the same events
 * with the same rule without its digest (plain fan-out): events/s of each;
 * then the digests' timers are made due and the time until all R x K digests
 * are sent is measured.
 *
 * Repeats (alternating the order inside each part), reports medians, min/max
 * and the spread ((max - min) / median) as the noise figure. */
#define _GNU_SOURCE
#include "bench.h"
#include "alloc.h"
#include "bench_util.h"
#include "cli.h"
#include "clock.h"
#include "engine.h"
#include "log.h"
#include "timers.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char bench_timers_help[] =
    "usage: crier bench timers [--timers N] [--spread S] [--events E] [--recipients R]\n"
    "                          [--keys K] [--repeat X] [--keep] [--json]\n"
    "                          [--database URL | --data-dir DIR] [--lua-dir DIR]\n"
    "\n"
    "Runs the engine (as crier serve does, in a child process; deliveries are parked\n"
    "at a paused endpoint, nothing is sent) and measures, per run:\n"
    "  delays   N held deliveries with plain delay timers due within S seconds (built\n"
    "           in SQL, the rows crier.apply_timing makes): each timer's lateness\n"
    "           (fired_at - due_at: p50, p99, max) and timers fired per second, beside\n"
    "           the SQL floor: the same claim (FOR UPDATE SKIP LOCKED, the worker's\n"
    "           batch size) and the same row changes as one statement per batch;\n"
    "  digests  E events for R recipients x K digest keys fanned out with a digest\n"
    "           rule (window 1h), and the same events with the same rule without\n"
    "           its digest: events/s of each; then the R x K digest timers are made\n"
    "           due: seconds until every digest is sent.\n"
    "Repeats X times (alternating the order of the compared sides), prints medians,\n"
    "min/max and spreads. --json prints one object. --timers 0 or --events 0 skips a\n"
    "part. Uses a fresh database crier_bench_timers on the embedded cluster by\n"
    "default; with --database (or CRIER_DATABASE_URL) it EMPTIES crier's tables\n"
    "there and refuses if they hold events of a tenant other than 'bench'. The rules\n"
    "are generated (--rules is ignored). --keep keeps the work directory (rules,\n"
    "engine logs); it is kept anyway when the bench fails.\n"
    "Defaults: N=100000, S=1, E=100000, R=100, K=10, X=3.\n";

typedef struct {
    int timers, events, recipients, keys, repeat;
    double spread;
    bool json, keep;
} bench_opts;

/* Figures of one run; NAN where a part was skipped. */
typedef struct {
    double late_p50_ms, late_p99_ms, late_max_ms; /* fired_at - due_at */
    double fired_per_s;   /* N / (last fired_at - first due_at) */
    double visible_s;     /* first due_at -> this process saw no pending timer */
    double floor_per_s;   /* N / the floor loop's wall time */
    double digest_events_per_s, plain_events_per_s;
    double flush_s;       /* digest timers made due -> last digest sent */
    double load;          /* 1-minute load average at the end of the run */
} bench_run;

typedef struct {
    bench_opts o;
    crier_cli cli;
    char dir[256];
    char rules_digest[300], rules_plain[300];
    char conninfo[2400];
    PGconn *conn;
    pid_t engine_pid;
    int n_logs;
} bench_ctx;

#define BENCH_TENANT "bench"
#define BENCH_TYPE "bench.comment"
/* Never reached: its endpoint is paused (crier.claim_deliveries parks the
 * deliveries it meets) and the engine runs with delivery.no_send. */
#define BENCH_TARGET "http://127.0.0.1:9/bench"

/* ------------------------------------------------------------------------ */
/* SQL helpers */

static int bench_exec_all(PGconn *conn, const char *const *sqls)
{
    for (; *sqls; sqls++)
        if (crier_bench_exec(conn, *sqls) < 0)
            return -1;
    return 0;
}

/* Runs a statement and returns the rows it changed (PQcmdTuples), or -1. */
static long bench_exec_count(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    long n = -1;
    if (PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK)
        n = atol(PQcmdTuples(res));
    else
        crier_cli_error("bench", "%.200s…: %s", sql, PQresultErrorMessage(res));
    PQclear(res);
    return n;
}

/* Empties crier's tables and parks the bench's target: an endpoint paused
 * with no probe due for a year, so the delivery worker parks every delivery
 * it claims (state 'paused', nothing sent). */
static int bench_reset_all(PGconn *conn)
{
    static const char *const sqls[] = {
        "TRUNCATE crier.timers, crier.throttle_hits, crier.digests, crier.events, crier.notifications,"
        " crier.deliveries, crier.delivery_attempts, crier.endpoints, crier.rules_status"
        " RESTART IDENTITY CASCADE",
        "INSERT INTO crier.endpoints (tenant, channel, target, state, paused_at, next_probe_at)"
        " VALUES ('" BENCH_TENANT "', 'webhook', '" BENCH_TARGET "', 'paused', now(),"
        " now() + interval '1 year')",
        NULL};
    return bench_exec_all(conn, sqls);
}

/* ------------------------------------------------------------------------ */
/* The engine, in a child process */

/* Forks a child that runs the engine (crier_engine_run, as crier serve does:
 * fan-out lanes, delivery worker, timer worker) on the bench database with
 * rules_dir, delivery.no_send, its output into engine-<n>.log (path into log).
 * Waits until it runs (its crier.rules_status row is written once it listens).
 * Returns 0 or -1 (message printed). */
static int bench_engine_start(bench_ctx *b, const char *rules_dir, char *log, size_t log_len)
{
    char sql[256];
    double v[1];

    snprintf(log, log_len, "%s/engine-%d.log", b->dir, ++b->n_logs);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        crier_cli_error("bench", "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        crier_engine_config cfg;
        char err[8192];
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(127);
        close(fd);
        memset(&cfg, 0, sizeof cfg);
        cfg.conninfo = b->conninfo;
        cfg.lua_dir = b->cli.lua_dir;
        cfg.rules_dir = rules_dir;
        cfg.poll_interval = 1.0;
        cfg.shutdown_deadline = 10.0;
        cfg.handle_signals = true;
        cfg.delivery.no_send = true;
        int rc = crier_engine_run(&cfg, NULL, err, sizeof err);
        if (rc < 0)
            fprintf(stderr, "crier bench: engine: %s\n", err);
        fflush(stderr);
        _exit(rc < 0 ? 1 : 0); /* not exit(): the parent's connection is not this process's to close */
    }
    b->engine_pid = pid;
    snprintf(sql, sizeof sql, "SELECT count(*) FROM crier.rules_status WHERE worker LIKE '%%:%d'", (int)pid);
    for (double until = crier_clock_s() + 60; crier_clock_s() < until; crier_bench_sleep(0.02)) {
        if (crier_bench_query_numbers(b->conn, sql, v, 1) < 0)
            return -1;
        if (v[0] > 0)
            return 0;
        int rc = crier_bench_wait(b->engine_pid, 0);
        if (rc >= 0) {
            b->engine_pid = 0;
            crier_cli_error("bench", "the engine exited with status %d at start", rc);
            crier_bench_print_tail(log);
            return -1;
        }
    }
    crier_cli_error("bench", "the engine did not start within 60 s");
    crier_bench_print_tail(log);
    return -1;
}

/* Stops the engine (SIGTERM: in-flight work finishes). Returns 0 when it
 * exited cleanly, -1 otherwise (message and log printed). */
static int bench_engine_stop(bench_ctx *b, const char *log)
{
    int rc = crier_bench_stop_child(&b->engine_pid, 15);
    if (rc != 0) {
        crier_cli_error("bench", "the engine exited with status %d on SIGTERM", rc);
        crier_bench_print_tail(log);
        return -1;
    }
    return 0;
}

/* Polls sql (one boolean-as-number column, then the database's clock as epoch
 * seconds) every interval until the first column is 1; the clock of that
 * answer goes to *at. Fails when the engine dies or timeout_s passes. */
static int bench_wait_until(bench_ctx *b, const char *sql, double interval, double timeout_s,
                            const char *what, const char *log, double *at)
{
    double v[2];
    for (double until = crier_clock_s() + timeout_s;; crier_bench_sleep(interval)) {
        if (crier_bench_query_numbers(b->conn, sql, v, 2) < 0)
            return -1;
        if (v[0] == 1) {
            if (at)
                *at = v[1];
            return 0;
        }
        int rc = crier_bench_wait(b->engine_pid, 0);
        if (rc >= 0) {
            b->engine_pid = 0;
            crier_cli_error("bench", "the engine exited (status %d) before %s", rc, what);
            crier_bench_print_tail(log);
            return -1;
        }
        if (crier_clock_s() >= until) {
            crier_cli_error("bench", "%s did not happen within %.0f s", what, timeout_s);
            crier_bench_print_tail(log);
            return -1;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Part A: delays */

/* Builds what the held deliveries hang on: N events (done) and one
 * notification each, recipients u0..u99. */
static int bench_delay_base(bench_ctx *b)
{
    char sql[1536];
    snprintf(sql, sizeof sql,
             "WITH e AS ("
             "  INSERT INTO crier.events (tenant, event_type, entity_id, payload, dedupe_key, state,"
             "      attempts, processed_at)"
             "  SELECT '" BENCH_TENANT "', '" BENCH_TYPE "', 'd' || g,"
             "      jsonb_build_object('to', 'u' || (g %% 100), 'k', 'k0'),"
             "      crier.natural_key('" BENCH_TYPE "', 'd' || g), 'done', 1, now()"
             "  FROM generate_series(1, %d) g"
             "  RETURNING id, entity_id, payload)"
             " INSERT INTO crier.notifications (key_hash, key, tenant, event_id, event_type, entity_id,"
             "     recipient_id)"
             " SELECT md5('" BENCH_TENANT ":' || e.entity_id)::uuid,"
             "     '" BENCH_TENANT ":" BENCH_TYPE ":' || e.entity_id || ':' || (e.payload->>'to'),"
             "     '" BENCH_TENANT "', e.id, '" BENCH_TYPE "', e.entity_id, e.payload->>'to' FROM e",
             b->o.timers);
    static const char *const after[] = {"ANALYZE crier.events", "ANALYZE crier.notifications",
                                        "CHECKPOINT", NULL};
    if (bench_reset_all(b->conn) < 0 || crier_bench_exec(b->conn, sql) < 0)
        return -1;
    return bench_exec_all(b->conn, after);
}

/* (Re)creates the held deliveries and their delay timers, the shapes
 * crier.apply_timing makes for a plain delay, due from lead seconds after now
 * over spread seconds (evenly), in one transaction that wakes the timer
 * workers (NOTIFY crier_timers); then ANALYZE. */
static int bench_delay_timers(bench_ctx *b, double lead)
{
    char sql[2048];
    snprintf(sql, sizeof sql,
             "WITH t AS (SELECT clock_timestamp() + make_interval(secs => %.6f) AS t0),"
             " d AS ("
             "  INSERT INTO crier.deliveries (notification_id, tenant, channel, message_id, target, body,"
             "      state, due_at, timing)"
             "  SELECT n.id, n.tenant, 'webhook', 'msg_' || replace(n.key_hash::text, '-', ''),"
             "      '" BENCH_TARGET "', '{}', 'held',"
             "      t.t0 + make_interval(secs => %.6f * (row_number() OVER (ORDER BY n.id) - 1) / %d),"
             "      '{\"delay\": 60}'::jsonb"
             "  FROM crier.notifications n, t"
             "  RETURNING id, tenant, due_at)"
             " INSERT INTO crier.timers (key, tenant, kind, due_at, delivery_id)"
             " SELECT crier.timer_key(ARRAY['delay', d.id::text]), d.tenant, 'delay', d.due_at, d.id FROM d",
             lead, b->o.spread, b->o.timers);
    static const char *const clear[] = {"TRUNCATE crier.timers, crier.deliveries, crier.delivery_attempts"
                                        " RESTART IDENTITY CASCADE",
                                        NULL};
    static const char *const after[] = {"NOTIFY crier_timers", "COMMIT", "ANALYZE crier.timers",
                                        "ANALYZE crier.deliveries", NULL};
    if (bench_exec_all(b->conn, clear) < 0 || crier_bench_exec(b->conn, "BEGIN") < 0 ||
        crier_bench_exec(b->conn, sql) < 0)
        return -1;
    return bench_exec_all(b->conn, after);
}

/* Checks that every timer fired once, as a release ('pending'), and that each
 * delivery is released (pending, or parked by the delivery worker). */
static int bench_delay_check(bench_ctx *b, const char *what)
{
    double v[3];
    if (crier_bench_query_numbers(
            b->conn,
            "SELECT (SELECT count(*) FROM crier.timers WHERE state = 'fired' AND outcome = 'pending'"
            "        AND attempts = 1),"
            " (SELECT count(*) FROM crier.timers),"
            " (SELECT count(*) FROM crier.deliveries WHERE state IN ('pending', 'sending', 'paused'))",
            v, 3) < 0)
        return -1;
    if ((long)v[0] != b->o.timers || (long)v[1] != b->o.timers || (long)v[2] != b->o.timers) {
        crier_cli_error("bench",
                        "%s: %.0f of %d timers fired once as a release (%.0f timers, %.0f deliveries "
                        "released)",
                        what, v[0], b->o.timers, v[1], v[2]);
        return -1;
    }
    return 0;
}

/* The daemon side of part A: the engine runs, the timers are created due
 * lead seconds later, and it fires them. */
static int bench_phase_delays(bench_ctx *b, double lead, bench_run *run)
{
    char log[400];
    double v[6], seen;

    if (bench_engine_start(b, b->rules_digest, log, sizeof log) < 0)
        return -1;
    if (bench_delay_timers(b, lead) < 0)
        goto fail;
    if (crier_bench_query_numbers(b->conn,
                                  "SELECT extract(epoch FROM min(due_at) - clock_timestamp()) FROM crier.timers",
                                  v, 1) < 0)
        goto fail;
    if (!(v[0] > 0.05)) {
        crier_cli_error("bench",
                        "the timers' set-up took longer than its lead of %.1f s (the first was due "
                        "%.2f s before it committed): the machine is too busy, try again",
                        lead, -v[0]);
        goto fail;
    }
    if (bench_wait_until(b,
                         "SELECT (NOT EXISTS (SELECT 1 FROM crier.timers WHERE state = 'pending'))::int,"
                         " extract(epoch FROM clock_timestamp())",
                         0.05, 120 + b->o.timers / 200.0 + lead, "every timer fired", log, &seen) < 0)
        goto fail;
    if (bench_engine_stop(b, log) < 0 || bench_delay_check(b, "delays") < 0)
        return -1;
    if (crier_bench_query_numbers(
            b->conn,
            "WITH l AS (SELECT extract(epoch FROM fired_at - due_at) * 1000 AS ms FROM crier.timers)"
            " SELECT (SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY ms) FROM l),"
            " (SELECT percentile_disc(0.99) WITHIN GROUP (ORDER BY ms) FROM l),"
            " (SELECT max(ms) FROM l),"
            " (SELECT extract(epoch FROM max(fired_at) - min(due_at)) FROM crier.timers),"
            " (SELECT extract(epoch FROM min(due_at)) FROM crier.timers),"
            " (SELECT count(*) FROM crier.timers)",
            v, 6) < 0)
        return -1;
    run->late_p50_ms = v[0];
    run->late_p99_ms = v[1];
    run->late_max_ms = v[2];
    run->fired_per_s = v[3] > 0 ? v[5] / v[3] : NAN;
    run->visible_s = seen - v[4];
    return 0;
fail:
    crier_bench_stop_child(&b->engine_pid, 15);
    return -1;
}

/* The floor of part A: the same rows, all due, fired by this process with
 * one statement per batch — the worker's claim (FOR UPDATE SKIP LOCKED,
 * earliest first, its batch size) and the same changes to the delivery
 * (held -> pending, due now) and the timer (fired, outcome 'pending'),
 * BEGIN … COMMIT per batch. No engine runs. */
static int bench_phase_floor(bench_ctx *b, bench_run *run)
{
    char sql[1536];
    long fired = 0, n;
    double t0;

    /* all due: the last one due now */
    if (bench_delay_timers(b, -b->o.spread - 0.001) < 0 || crier_bench_exec(b->conn, "CHECKPOINT") < 0)
        return -1;
    snprintf(sql, sizeof sql,
             "WITH c AS ("
             "  SELECT tm.id, tm.delivery_id FROM crier.timers tm"
             "  WHERE tm.state = 'pending' AND tm.due_at <= clock_timestamp()"
             "  ORDER BY tm.due_at LIMIT %d FOR UPDATE SKIP LOCKED"
             "), d AS ("
             "  UPDATE crier.deliveries dl SET state = 'pending', due_at = now()"
             "  FROM c WHERE dl.id = c.delivery_id AND dl.state = 'held'"
             "  RETURNING dl.id"
             ")"
             " UPDATE crier.timers tm SET state = 'fired', fired_at = clock_timestamp(),"
             "     outcome = CASE WHEN c.delivery_id IN (SELECT id FROM d) THEN 'pending'"
             "                    ELSE 'nothing to do' END,"
             "     attempts = tm.attempts + 1"
             " FROM c WHERE tm.id = c.id",
             CRIER_TIMERS_DEFAULT_BATCH);
    t0 = crier_clock_s();
    do {
        if (crier_bench_exec(b->conn, "BEGIN") < 0)
            return -1;
        n = bench_exec_count(b->conn, sql);
        if (n < 0 || crier_bench_exec(b->conn, "COMMIT") < 0) {
            crier_bench_exec(b->conn, "ROLLBACK");
            return -1;
        }
        fired += n;
    } while (n > 0);
    run->floor_per_s = (double)fired / (crier_clock_s() - t0);
    return bench_delay_check(b, "floor");
}

/* ------------------------------------------------------------------------ */
/* Part B: digests */

/* Writes the two rules directories: the digest rule (webhook, window 1h, key
 * payload.k, a small JSON body) and the same rule without its digest. */
static int bench_write_rules(bench_ctx *b)
{
    static const char head[] =
        "local crier = require \"crier\"\n"
        "\n"
        "crier.event_type \"" BENCH_TYPE "\" {\n"
        "    description = \"crier bench timers\",\n"
        "    payload = { to = \"string\", k = \"string\" },\n"
        "}\n"
        "\n"
        "crier.rule \"" BENCH_TYPE "\" {\n"
        "    recipients = function(event) return { event.payload.to } end,\n"
        "    channels = { \"webhook\" },\n"
        "    webhook = {\n"
        "        url = \"" BENCH_TARGET "\",\n";
    static const char digest[] =
        "        digest = {\n"
        "            window = \"1h\",\n"
        "            key = function(event) return event.payload.k end,\n"
        "            body = function(event)\n"
        "                return { to = event.payload.to, key = event.digest.key, count = event.digest.count }\n"
        "            end,\n"
        "        },\n";
    static const char tail[] = "    },\n}\n";
    char path[400], text[4096];

    snprintf(b->rules_digest, sizeof b->rules_digest, "%s/rules-digest", b->dir);
    snprintf(b->rules_plain, sizeof b->rules_plain, "%s/rules-plain", b->dir);
    if (mkdir(b->rules_digest, 0755) < 0 || mkdir(b->rules_plain, 0755) < 0) {
        crier_cli_error("bench", "cannot create the rules directories in %s: %s", b->dir, strerror(errno));
        return -1;
    }
    snprintf(text, sizeof text,
             "-- Generated by crier bench timers: each event's recipient gets its items in a\n"
             "-- digest per payload.k, sent once an hour (never sent: the endpoint is paused).\n%s%s%s",
             head, digest, tail);
    snprintf(path, sizeof path, "%s/bench.lua", b->rules_digest);
    if (crier_bench_write_file(path, text) < 0)
        return -1;
    snprintf(text, sizeof text,
             "-- Generated by crier bench timers: the digest rule's twin without the digest\n"
             "-- (plain fan-out: one webhook per event; never sent, the endpoint is paused).\n%s%s",
             head, tail);
    snprintf(path, sizeof path, "%s/bench.lua", b->rules_plain);
    return crier_bench_write_file(path, text);
}

/* Inserts the E pending events (event g: recipient u<g mod R>, key
 * k<(g / R) mod K>, so every recipient's items alternate over its keys). */
static int bench_digest_events(bench_ctx *b)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO crier.events (tenant, event_type, entity_id, payload, dedupe_key)"
             " SELECT '" BENCH_TENANT "', '" BENCH_TYPE "', 'c' || g,"
             "     jsonb_build_object('to', 'u' || (g %% %d), 'k', 'k' || ((g / %d) %% %d)),"
             "     crier.natural_key('" BENCH_TYPE "', 'c' || g)"
             " FROM generate_series(0, %d - 1) g",
             b->o.recipients, b->o.recipients, b->o.keys, b->o.events);
    static const char *const after[] = {"ANALYZE crier.events", "CHECKPOINT", NULL};
    if (bench_reset_all(b->conn) < 0 || crier_bench_exec(b->conn, sql) < 0)
        return -1;
    return bench_exec_all(b->conn, after);
}

/* Events fanned out per second, from events.processed_at (the fan-out
 * transaction's start): (E - the first batch's events) / (last - first). */
static double bench_events_rate(bench_ctx *b, const char *what)
{
    double v[4];
    if (crier_bench_query_numbers(
            b->conn,
            "WITH m AS (SELECT min(processed_at) AS lo, max(processed_at) AS hi FROM crier.events)"
            " SELECT (SELECT count(*) FROM crier.events WHERE state = 'done'),"
            " (SELECT count(*) FROM crier.events, m WHERE processed_at = m.lo),"
            " (SELECT extract(epoch FROM hi - lo) FROM m), (SELECT count(*) FROM crier.events)",
            v, 4) < 0)
        return -1;
    if ((long)v[0] != b->o.events || (long)v[3] != b->o.events) {
        crier_cli_error("bench", "%s: %.0f of %d events fanned out", what, v[0], b->o.events);
        return -1;
    }
    if (!(v[2] > 0) || v[0] - v[1] < 1) {
        crier_cli_error("bench", "%s: all events fanned out in one batch: too few to time (raise --events)",
                        what);
        return -1;
    }
    return (v[0] - v[1]) / v[2];
}

/* One side of part B: E events fanned out by the engine with the digest rule
 * (then the digests flushed) or its plain twin. */
static int bench_phase_fanout(bench_ctx *b, bool digest, bench_run *run)
{
    char log[400], sql[512];
    double v[4], flush_at;
    const long digests = (long)b->o.recipients * b->o.keys;

    if (bench_digest_events(b) < 0 || bench_engine_start(b, digest ? b->rules_digest : b->rules_plain, log,
                                                         sizeof log) < 0)
        return -1;
    if (bench_wait_until(b,
                         "SELECT (NOT EXISTS (SELECT 1 FROM crier.events WHERE state = 'pending'))::int,"
                         " extract(epoch FROM clock_timestamp())",
                         0.1, 120 + b->o.events / 100.0, "every event fanned out", log, NULL) < 0)
        goto fail;
    double rate = bench_events_rate(b, digest ? "digest" : "plain");
    if (rate < 0)
        goto fail;
    if (!digest) {
        run->plain_events_per_s = rate;
        return bench_engine_stop(b, log);
    }
    run->digest_events_per_s = rate;
    if (crier_bench_query_numbers(b->conn,
                                  "SELECT (SELECT count(*) FROM crier.deliveries WHERE state = 'digested'),"
                                  " (SELECT count(*) FROM crier.digests WHERE state = 'open'),"
                                  " (SELECT coalesce(sum(items), 0) FROM crier.digests)",
                                  v, 3) < 0)
        goto fail;
    if ((long)v[0] != b->o.events || (long)v[1] != digests || (long)v[2] != b->o.events) {
        crier_cli_error("bench", "digest: %.0f deliveries digested into %.0f open digests holding %.0f items;"
                                 " expected %d into %ld",
                        v[0], v[1], v[2], b->o.events, digests);
        goto fail;
    }
    /* The windows end now: their timers due, the timer worker woken. */
    if (crier_bench_exec(b->conn, "BEGIN") < 0 ||
        crier_bench_query_numbers(b->conn,
                                  "WITH u AS (UPDATE crier.timers SET due_at = clock_timestamp()"
                                  "  WHERE kind = 'digest' AND state = 'pending' RETURNING due_at)"
                                  " SELECT count(*), extract(epoch FROM min(due_at)) FROM u",
                                  v, 2) < 0 ||
        crier_bench_exec(b->conn, "NOTIFY crier_timers") < 0 || crier_bench_exec(b->conn, "COMMIT") < 0)
        goto fail;
    flush_at = v[1];
    if (bench_wait_until(b,
                         "SELECT (NOT EXISTS (SELECT 1 FROM crier.digests WHERE state <> 'sent'))::int,"
                         " extract(epoch FROM clock_timestamp())",
                         0.05, 120 + digests / 10.0, "every digest sent", log, NULL) < 0)
        goto fail;
    if (bench_engine_stop(b, log) < 0)
        return -1;
    snprintf(sql, sizeof sql,
             "SELECT extract(epoch FROM max(sent_at)) - %.6f, count(*),"
             " (SELECT count(*) FROM crier.deliveries WHERE digest_id IS NULL)"
             " FROM crier.digests WHERE state = 'sent'",
             flush_at);
    if (crier_bench_query_numbers(b->conn, sql, v, 3) < 0)
        return -1;
    if ((long)v[1] != digests || (long)v[2] != digests) {
        crier_cli_error("bench", "digest: %.0f digests sent with %.0f deliveries; expected %ld", v[1], v[2],
                        digests);
        return -1;
    }
    run->flush_s = v[0];
    return 0;
fail:
    crier_bench_stop_child(&b->engine_pid, 15);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Report */

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

static void json_number(const char *name, double v, int decimals)
{
    if (isnan(v))
        printf("\"%s\": null, ", name);
    else
        printf("\"%s\": %.*f, ", name, decimals, v);
}

/* A figure in JSON: NAME, NAME_min, NAME_max, NAME_spread_pct. */
static void json_figure(const char *name, bench_figure f, int decimals)
{
    char key[96];
    json_number(name, f.med, decimals);
    snprintf(key, sizeof key, "%s_min", name);
    json_number(key, f.lo, decimals);
    snprintf(key, sizeof key, "%s_max", name);
    json_number(key, f.hi, decimals);
    snprintf(key, sizeof key, "%s_spread_pct", name);
    json_number(key, f.spread_pct, 1);
}

static void text_figure(const char *name, bench_figure f, int decimals, const char *note)
{
    if (isnan(f.med))
        return;
    printf("%s: %.*f (min %.*f, max %.*f, spread %.1f%%)%s\n", name, decimals, f.med, decimals, f.lo, decimals,
           f.hi, f.spread_pct, note);
}

#define FIG(field) bench_figure_of(runs, o->repeat, offsetof(bench_run, field))

static void bench_report(const bench_opts *o, const bench_run *runs, double load_start)
{
    bench_figure p50 = FIG(late_p50_ms), p99 = FIG(late_p99_ms), pmax = FIG(late_max_ms);
    bench_figure fired = FIG(fired_per_s), visible = FIG(visible_s), floor_ = FIG(floor_per_s);
    bench_figure dig = FIG(digest_events_per_s), plain = FIG(plain_events_per_s), flush = FIG(flush_s);
    bench_figure load = FIG(load);
    long digests = o->events > 0 ? (long)o->recipients * o->keys : 0;
    double fired_ratio = fired.med / floor_.med, dig_ratio = dig.med / plain.med;

    if (o->json) {
        printf("{");
        json_figure("lateness_p50_ms", p50, 1);
        json_figure("lateness_p99_ms", p99, 1);
        json_figure("lateness_max_ms", pmax, 1);
        json_figure("fired_per_s", fired, 0);
        json_figure("floor_per_s", floor_, 0);
        json_number("fired_vs_floor", fired_ratio, 3);
        json_number("offered_per_s", o->spread > 0 && o->timers > 0 ? o->timers / o->spread : NAN, 0);
        json_figure("all_fired_visible_s", visible, 3);
        if (isnan(p99.med))
            printf("\"p99_target_met\": null, ");
        else
            printf("\"p99_target_met\": %s, ", p99.med < 1000 ? "true" : "false");
        json_figure("digest_events_per_s", dig, 0);
        json_figure("plain_events_per_s", plain, 0);
        json_number("digest_vs_plain", dig_ratio, 3);
        json_figure("flush_s", flush, 3);
        json_number("digests_flushed_per_s", flush.med > 0 ? (double)digests / flush.med : NAN, 0);
        json_figure("load_avg", load, 2);
        json_number("load_avg_start", load_start, 2);
        printf("\"timers\": %d, \"spread_s\": %.3f, \"timer_batch\": %d, \"events\": %d, \"recipients\": %d, "
               "\"digest_keys\": %d, \"digests\": %ld, \"cpus\": %ld, \"runs\": %d}\n",
               o->timers, o->spread, CRIER_TIMERS_DEFAULT_BATCH, o->events, o->recipients, o->keys, digests,
               sysconf(_SC_NPROCESSORS_ONLN), o->repeat);
        return;
    }
    if (o->timers > 0) {
        printf("delays: %d timers due within %.3g s, fired by the engine's timer worker (batch %d)\n", o->timers,
               o->spread, CRIER_TIMERS_DEFAULT_BATCH);
        text_figure("lateness_p50_ms", p50, 1, "");
        text_figure("lateness_p99_ms", p99, 1, p99.med < 1000 ? " (target < 1000: met)" : " (target < 1000: missed)");
        text_figure("lateness_max_ms", pmax, 1, "");
        text_figure("fired_per_s", fired, 0, "");
        if (o->spread > 0)
            printf("offered_per_s: %.0f (timers / spread: the most the schedule lets fire per second)\n",
                   o->timers / o->spread);
        text_figure("floor_per_s", floor_, 0, " (the same claim and row changes, one statement per batch)");
        printf("fired_vs_floor: %.3f\n", fired_ratio);
        text_figure("all_fired_visible_s", visible, 3, " (first due -> no pending timer seen)");
    }
    if (o->events > 0) {
        printf("digests: %d events for %d recipients x %d keys (%ld digests)\n", o->events, o->recipients,
               o->keys, digests);
        text_figure("digest_events_per_s", dig, 0, "");
        text_figure("plain_events_per_s", plain, 0, " (the same rule without its digest)");
        printf("digest_vs_plain: %.3f\n", dig_ratio);
        text_figure("flush_s", flush, 3, " (digest timers due -> last digest sent)");
        printf("digests_flushed_per_s: %.0f\n", (double)digests / flush.med);
    }
    printf("runs: %d\n", o->repeat);
    printf("load_avg: %.2f (min %.2f, max %.2f; before the first run %.2f; 1-minute load average after each "
           "run, %ld CPUs)\n",
           load.med, load.lo, load.hi, load_start, sysconf(_SC_NPROCESSORS_ONLN));
}

/* ------------------------------------------------------------------------ */
/* Entry point */

static int bench_nonnegative(const char *name, const char *arg, long max, int *out)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (*arg == '\0' || *end != '\0' || v < 0 || v > max) {
        crier_cli_error("bench", "--%s expects a whole number from 0 to %ld, got '%s'", name, max, arg);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int bench_option(void *ud, int opt, const char *arg)
{
    bench_opts *o = ud;
    char *end;

    switch (opt) {
    case 't':
        return bench_nonnegative("timers", arg, 10000000, &o->timers);
    case 'e':
        return bench_nonnegative("events", arg, 10000000, &o->events);
    case 'r':
        return crier_cli_positive_int("bench", "recipients", arg, 100000, &o->recipients);
    case 'K':
        return crier_cli_positive_int("bench", "keys", arg, 1000, &o->keys);
    case 'n':
        return crier_cli_positive_int("bench", "repeat", arg, 1000, &o->repeat);
    case 's':
        o->spread = strtod(arg, &end);
        if (*arg == '\0' || *end != '\0' || !(o->spread >= 0 && o->spread <= 3600)) {
            crier_cli_error("bench", "--spread expects seconds from 0 to 3600, got '%s'", arg);
            return -1;
        }
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

int crier_bench_timers(int argc, char **argv)
{
    static const struct option options[] = {CLI_COMMON_OPTIONS,
                                            {"timers", required_argument, NULL, 't'},
                                            {"spread", required_argument, NULL, 's'},
                                            {"events", required_argument, NULL, 'e'},
                                            {"recipients", required_argument, NULL, 'r'},
                                            {"keys", required_argument, NULL, 'K'},
                                            {"repeat", required_argument, NULL, 'n'},
                                            {"keep", no_argument, NULL, 'k'},
                                            {"json", no_argument, NULL, 'j'},
                                            {NULL, 0, NULL, 0}};
    bench_ctx b;
    crier_database db = {0};
    bench_run *runs = NULL;
    double load_start;
    bool fresh;
    int rc = 2;

    memset(&b, 0, sizeof b);
    b.o = (bench_opts){100000, 100000, 100, 10, 3, 1.0, false, false};
    crier_cli_init(&b.cli);
    if (crier_cli_parse(&b.cli, bench_timers_help, argc, argv, options, bench_option, &b.o, &rc))
        goto out;
    if (optind < argc) {
        crier_cli_error("bench", "unexpected argument '%s' (see crier bench timers --help)", argv[optind]);
        goto out;
    }
    if (b.o.timers == 0 && b.o.events == 0) {
        crier_cli_error("bench", "--timers 0 and --events 0 leave nothing to measure");
        goto out;
    }
    rc = 1;
    /* The engine's info lines would drown the figures. */
    if (!getenv("CRIER_LOG"))
        crier_log_set_level(CRIER_LOG_WARN);
    if (crier_bench_open_database(b.cli.database, b.cli.data_dir, &db, "crier_bench_timers", false, false,
                                  BENCH_TENANT, b.conninfo, sizeof b.conninfo, &b.conn, &fresh) < 0)
        goto out;
    snprintf(b.dir, sizeof b.dir, "%s/crier-bench-timers.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(b.dir)) {
        crier_cli_error("bench", "cannot create a work directory %s: %s", b.dir, strerror(errno));
        b.dir[0] = '\0';
        goto out;
    }
    if (bench_write_rules(&b) < 0)
        goto out;
    runs = crier_xcalloc((size_t)b.o.repeat, sizeof *runs);
    load_start = crier_bench_load();
    if (!b.o.json)
        fprintf(stderr, "bench timers: %d delay timers due within %.3g s; %d events into %ld digests; %d runs;"
                        " work directory %s\n",
                b.o.timers, b.o.spread, b.o.events, b.o.events > 0 ? (long)b.o.recipients * b.o.keys : 0,
                b.o.repeat, b.dir);
    for (int i = 0; i < b.o.repeat; i++) {
        bench_run *r = &runs[i];
        r->late_p50_ms = r->late_p99_ms = r->late_max_ms = r->fired_per_s = r->visible_s = NAN;
        r->floor_per_s = r->digest_events_per_s = r->plain_events_per_s = r->flush_s = NAN;
        if (b.o.timers > 0) {
            double t0 = crier_clock_s();
            if (bench_delay_base(&b) < 0)
                goto out;
            /* the timers must be due after their set-up has committed */
            double lead = 1.5 + 2 * (crier_clock_s() - t0);
            /* alternate the order so that neither side always runs on a warmer cache */
            if (i % 2 == 0 ? bench_phase_delays(&b, lead, r) < 0 || bench_phase_floor(&b, r) < 0
                           : bench_phase_floor(&b, r) < 0 || bench_phase_delays(&b, lead, r) < 0)
                goto out;
        }
        if (b.o.events > 0 &&
            (i % 2 == 0 ? bench_phase_fanout(&b, true, r) < 0 || bench_phase_fanout(&b, false, r) < 0
                        : bench_phase_fanout(&b, false, r) < 0 || bench_phase_fanout(&b, true, r) < 0))
            goto out;
        r->load = crier_bench_load();
        if (!b.o.json) {
            fprintf(stderr, "  run %d:", i + 1);
            if (b.o.timers > 0)
                fprintf(stderr, " lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms; %.0f fired/s, floor %.0f/s;",
                        r->late_p50_ms, r->late_p99_ms, r->late_max_ms, r->fired_per_s, r->floor_per_s);
            if (b.o.events > 0)
                fprintf(stderr, " digest %.0f events/s, plain %.0f events/s, flush %.3f s;",
                        r->digest_events_per_s, r->plain_events_per_s, r->flush_s);
            fprintf(stderr, " load %.1f\n", r->load);
        }
    }
    bench_report(&b.o, runs, load_start);
    rc = 0;
out:
    crier_bench_stop_child(&b.engine_pid, 15);
    if (b.conn)
        PQfinish(b.conn);
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
