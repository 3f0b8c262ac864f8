/* pg_async.c — nonblocking libpq on libev, one query in flight (see pg_async.h). */
#include "pg_async.h"

#include "log.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PG_MAX_PREPARED 16
#define PG_NAME_LEN 64

struct crier_pg {
    struct ev_loop *loop;
    PGconn *conn;
    char *conninfo;
    char name[32];
    ev_io io;
    bool io_active;
    bool busy;
    bool broken;
    bool connecting;      /* a reconnect in progress: PQconnectPoll, then its setup statement */
    bool setting_up;      /* the reconnect's setup statement is in flight */
    ev_timer connect_deadline;
    PGresult *last; /* the latest result of the query in flight */
    crier_pg_result_fn cb;
    void *cb_ud;
    /* Statements prepared on this connection (names; emptied by a reconnect),
     * and the one whose PREPARE is in flight, to execute when it completes. */
    char prepared[PG_MAX_PREPARED][PG_NAME_LEN];
    int n_prepared;
    bool preparing;
    int preparing_slot;
    const crier_pg_params *exec_params;
    /* COPY … FROM STDIN in flight: its rows, and how much of them was queued */
    const char *copy_data;
    size_t copy_len, copy_sent;
    bool copy_pending; /* the COPY was sent; its rows go once the server asks for them */
    bool copying;      /* the server asked for them: rows (and the end) still to queue */
    crier_pg_notify_fn notify;
    void *notify_ud;
    bool keep_result; /* the callback running took its result (crier_pg_keep_result) */
    /* A statement and its COMMIT in one pipeline (crier_pg_query_prepared_commit):
     * the results of its queries by position ([prepare,] statement, COMMIT),
     * the position being read, and the slot of a PREPARE sent with it (-1: none). */
    bool pipeline;
    PGresult *pipe_res[3];
    int pipe_n, pipe_at, pipe_prepare_slot;
};

static void pg_watch(crier_pg *pg, int events)
{
    if (pg->io_active) {
        if ((pg->io.events & (EV_READ | EV_WRITE)) == events && pg->io.fd == PQsocket(pg->conn))
            return;
        ev_io_stop(pg->loop, &pg->io);
        pg->io_active = false;
    }
    if (events && PQsocket(pg->conn) >= 0) {
        ev_io_set(&pg->io, PQsocket(pg->conn), events);
        ev_io_start(pg->loop, &pg->io);
        pg->io_active = true;
    }
}

static void pg_dispatch_notifies(crier_pg *pg)
{
    PGnotify *n;
    while ((n = PQnotifies(pg->conn)) != NULL) {
        if (pg->notify)
            pg->notify(pg->notify_ud, n->relname, n->extra);
        PQfreemem(n);
    }
}

/* A query's result that is not an error. */
static bool pg_result_ok(const PGresult *res)
{
    return res && (PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK);
}

/* After an error result: the session lost its prepared statements (DISCARD
 * ALL, a pooler's new session) when the server says so; they are prepared
 * again on next use. */
static void pg_note_error(crier_pg *pg, const PGresult *res)
{
    if (res && PQresultStatus(res) == PGRES_FATAL_ERROR) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (state && strcmp(state, "26000") == 0)
            pg->n_prepared = 0;
    }
}

/* Forgets a pipeline's state and results (a failed connection is replaced
 * whole on reconnect, its pipeline mode with it). */
static void pg_pipeline_clear(crier_pg *pg)
{
    for (int i = 0; i < 3; i++) {
        PQclear(pg->pipe_res[i]);
        pg->pipe_res[i] = NULL;
    }
    pg->pipeline = false;
}

/* Marks the connection broken and fails the query in flight. */
static void pg_fail(crier_pg *pg, const char *what)
{
    char msg[512];
    crier_pg_result_fn cb = pg->cb;
    void *ud = pg->cb_ud;

    snprintf(msg, sizeof msg, "%s: %s", what, PQerrorMessage(pg->conn));
    crier_error("pg", "%s connection: %s", pg->name, msg);
    pg->broken = true;
    pg->preparing = false;
    pg->copy_pending = pg->copying = false;
    pg_pipeline_clear(pg);
    pg_watch(pg, 0);
    PQclear(pg->last);
    pg->last = NULL;
    if (pg->busy) {
        pg->busy = false;
        pg->cb = NULL;
        if (cb)
            cb(ud, NULL, msg);
    }
}

static void pg_connect_step(crier_pg *pg);

/* Sends a prepared statement's execution (the connection is idle, or its
 * PREPARE has just completed). Returns 0 or -1 (nothing sent). */
static int pg_send_prepared(crier_pg *pg, const char *name, const crier_pg_params *params)
{
    return PQsendQueryPrepared(pg->conn, name, params ? params->n : 0, params ? params->values : NULL,
                               params ? params->lengths : NULL, params ? params->formats : NULL, 0)
               ? 0
               : -1;
}

/* The PREPARE in flight completed: if it worked, the statement is
 * remembered and its execution sent, and true is returned (the caller waits
 * for that result). If it failed (or the execution cannot be sent), false:
 * the callback gets the error. */
static bool pg_prepared_then_execute(crier_pg *pg)
{
    pg->preparing = false;
    if (!pg->last || PQresultStatus(pg->last) != PGRES_COMMAND_OK)
        return false;
    PQclear(pg->last);
    pg->last = NULL;
    pg->n_prepared = pg->preparing_slot + 1;
    int r = pg_send_prepared(pg, pg->prepared[pg->preparing_slot], pg->exec_params) < 0 ? -1 : PQflush(pg->conn);
    if (r < 0) {
        crier_error("pg", "%s connection: cannot send a prepared statement: %s", pg->name,
                    PQerrorMessage(pg->conn));
        pg->broken = true;
        return false; /* the callback gets "query returned no result" */
    }
    pg_watch(pg, r == 1 ? (EV_READ | EV_WRITE) : EV_READ);
    return true;
}

/* libpq refused COPY data: if the connection still works, the server ended
 * the copy (an error, say a row that broke a unique index), and that result
 * is read as any other; else the connection failed. */
static int pg_copy_refused(crier_pg *pg, const char *what)
{
    pg->copying = false;
    if (PQstatus(pg->conn) != CONNECTION_OK) {
        pg_fail(pg, what);
        return -1;
    }
    pg_watch(pg, EV_READ);
    return 0;
}

/* Queues the COPY's rows and its end on the connection, as far as libpq's
 * output buffer takes them, and flushes; what is left waits for the socket
 * to be writable. Returns -1 if the connection failed (pg_fail called). */
static int pg_copy_push(crier_pg *pg)
{
    while (pg->copy_sent < pg->copy_len) {
        size_t n = pg->copy_len - pg->copy_sent;
        if (n > 256 * 1024)
            n = 256 * 1024;
        int r = PQputCopyData(pg->conn, pg->copy_data + pg->copy_sent, (int)n);
        if (r < 0)
            return pg_copy_refused(pg, "sending COPY rows failed");
        if (r == 0) { /* the output buffer is full: wait until the socket drains */
            pg_watch(pg, EV_READ | EV_WRITE);
            return 0;
        }
        pg->copy_sent += n;
    }
    int r = PQputCopyEnd(pg->conn, NULL);
    if (r < 0)
        return pg_copy_refused(pg, "ending the COPY failed");
    if (r == 0) {
        pg_watch(pg, EV_READ | EV_WRITE);
        return 0;
    }
    pg->copying = false;
    r = PQflush(pg->conn);
    if (r < 0) {
        pg_fail(pg, "sending COPY rows failed");
        return -1;
    }
    pg_watch(pg, r == 1 ? (EV_READ | EV_WRITE) : EV_READ);
    return 0;
}

/* Runs the callback of a completed query with res (cleared after it unless
 * the callback keeps it). */
static void pg_callback(crier_pg *pg, crier_pg_result_fn cb, void *ud, PGresult *res, const char *err)
{
    pg->keep_result = false;
    if (cb)
        cb(ud, res, err);
    if (!pg->keep_result)
        PQclear(res);
    pg->keep_result = false;
}

/* Reads one result of a pipeline (crier_pg_query_prepared_commit). At its
 * end (the sync), leaves pipeline mode and runs the callback: with the first
 * error (a failed PREPARE or statement; the COMMIT then did not run), else
 * with the statement's result and then, the connection idle again, with the
 * COMMIT's. Returns true when the caller must stop reading (the pipeline
 * ended, or the connection failed). */
static bool pg_pipeline_read(crier_pg *pg)
{
    PGresult *res = PQgetResult(pg->conn);
    if (!res) { /* the end of one query's results */
        pg->pipe_at++;
        return false;
    }
    if (PQresultStatus(res) != PGRES_PIPELINE_SYNC) {
        int at = pg->pipe_at < pg->pipe_n ? pg->pipe_at : pg->pipe_n - 1;
        if (pg->pipe_res[at] && PQresultStatus(pg->pipe_res[at]) == PGRES_FATAL_ERROR) {
            PQclear(res);
        } else {
            PQclear(pg->pipe_res[at]);
            pg->pipe_res[at] = res;
        }
        return false;
    }
    PQclear(res);
    if (!PQexitPipelineMode(pg->conn)) {
        pg_fail(pg, "cannot leave pipeline mode");
        return true;
    }
    PGresult *r[3] = {pg->pipe_res[0], pg->pipe_res[1], pg->pipe_res[2]};
    int n = pg->pipe_n, first = n - 2; /* the statement's position, the COMMIT's is n - 1 */
    pg->pipe_res[0] = pg->pipe_res[1] = pg->pipe_res[2] = NULL;
    pg->pipeline = false;
    if (pg->pipe_prepare_slot >= 0 && pg_result_ok(r[0]))
        pg->n_prepared = pg->pipe_prepare_slot + 1;
    /* the PREPARE's or the statement's error, if any (the COMMIT then did not run) */
    int failed = -1;
    for (int i = 0; i <= first && failed < 0; i++)
        if (!pg_result_ok(r[i]))
            failed = i;
    pg_note_error(pg, r[first]);
    crier_pg_result_fn cb = pg->cb;
    void *ud = pg->cb_ud;
    for (int i = 0; i < n; i++)
        if (failed >= 0 ? i != failed : i < first)
            PQclear(r[i]);
    if (failed >= 0) {
        pg->busy = false;
        pg->cb = NULL;
        pg_callback(pg, cb, ud, r[failed], r[failed] ? NULL : "query returned no result");
    } else {
        /* the statement's result while the connection still counts as busy
         * (no query may be sent before the COMMIT's result is handed over) */
        pg_callback(pg, cb, ud, r[first], NULL);
        pg->busy = false;
        pg->cb = NULL;
        pg_callback(pg, cb, ud, r[n - 1], r[n - 1] ? NULL : "COMMIT returned no result");
    }
    pg_dispatch_notifies(pg);
    if (PQstatus(pg->conn) == CONNECTION_BAD)
        pg_fail(pg, "connection lost");
    return true;
}

static void pg_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    crier_pg *pg = w->data;

    if (pg->connecting && !pg->setting_up) {
        pg_connect_step(pg);
        return;
    }
    if (revents & EV_WRITE) {
        int r = PQflush(pg->conn);
        if (r < 0) {
            pg_fail(pg, "sending the query failed");
            return;
        }
        if (pg->copying) {
            if (pg_copy_push(pg) < 0)
                return;
        } else if (r == 0)
            pg_watch(pg, EV_READ);
    }
    if (!(revents & EV_READ))
        return;
    if (!PQconsumeInput(pg->conn)) {
        pg_fail(pg, "reading from the server failed");
        return;
    }
    pg_dispatch_notifies(pg);
    if (pg->copying)
        return; /* rows still to send: the result comes after them */
    while (pg->busy && pg->pipeline && !PQisBusy(pg->conn)) {
        if (pg_pipeline_read(pg))
            return;
    }
    while (pg->busy && !pg->pipeline && !PQisBusy(pg->conn)) {
        PGresult *res = PQgetResult(pg->conn);
        if (res && PQresultStatus(res) == PGRES_COPY_IN) {
            /* the server asks for the COPY's rows */
            PQclear(res);
            if (!pg->copy_pending) {
                pg_fail(pg, "the server asked for COPY rows that were never offered");
                return;
            }
            pg->copy_pending = false;
            pg->copying = true;
            if (pg_copy_push(pg) < 0)
                return;
            break; /* its result comes once the rows are in */
        }
        if (res) {
            /* Keep the last result of the query (an error result wins). */
            if (pg->last && PQresultStatus(pg->last) == PGRES_FATAL_ERROR)
                PQclear(res);
            else {
                PQclear(pg->last);
                pg->last = res;
            }
            continue;
        }
        /* NULL: the query is complete. */
        if (pg->preparing && pg_prepared_then_execute(pg))
            continue; /* the statement now runs; its result comes next */
        pg_note_error(pg, pg->last);
        crier_pg_result_fn cb = pg->cb;
        void *ud = pg->cb_ud;
        PGresult *last = pg->last;
        pg->last = NULL;
        pg->busy = false;
        pg->copy_pending = false; /* (a COPY refused before its rows were asked for) */
        pg->cb = NULL;
        pg_callback(pg, cb, ud, last, last ? NULL : "query returned no result");
        pg_dispatch_notifies(pg);
        if (PQstatus(pg->conn) == CONNECTION_BAD) {
            pg_fail(pg, "connection lost");
            return;
        }
        break;
    }
    (void)loop;
}

/* No JIT for the engine's statements: they are batches of a few thousand
 * rows, run in tens of ms, and JIT compiled the fan-out's write on every full
 * batch (its estimate crosses jit_above_cost) for 40-90 ms, more than the
 * statement's own work (docs/BENCHMARKS.md, Pipeline). */
static const char SQL_SETUP[] = "SET jit = off";

/* How long a reconnect may take before it is abandoned (libpq leaves
 * connect_timeout to the application when it connects without blocking). */
#define PG_RECONNECT_DEADLINE 10.0

/* Starts a connection: blocking (crier_pg_connect at startup) or not (a
 * reconnect on the loop). pg_stat_activity names the worker and its
 * connection ("crier timers 4242"), unless the connection string sets
 * application_name itself. */
static PGconn *pg_start(crier_pg *pg, bool blocking)
{
    char app[96];
    const char *const keys[] = {"dbname", "fallback_application_name", NULL};
    const char *values[] = {pg->conninfo, app, NULL};
    snprintf(app, sizeof app, "crier %s %d", pg->name, (int)getpid());
    return blocking ? PQconnectdbParams(keys, values, 1) : PQconnectStartParams(keys, values, 1);
}

static int pg_open(crier_pg *pg, char *err, size_t err_len)
{
    pg->conn = pg_start(pg, true);
    if (PQstatus(pg->conn) != CONNECTION_OK) {
        snprintf(err, err_len, "cannot connect to the database: %s", PQerrorMessage(pg->conn));
        PQfinish(pg->conn);
        pg->conn = NULL;
        return -1;
    }
    PGresult *res = PQexec(pg->conn, SQL_SETUP);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        snprintf(err, err_len, "cannot set up the connection (SET jit = off): %s", PQresultErrorMessage(res));
        PQclear(res);
        PQfinish(pg->conn);
        pg->conn = NULL;
        return -1;
    }
    PQclear(res);
    if (PQsetnonblocking(pg->conn, 1) != 0) {
        snprintf(err, err_len, "cannot make the connection nonblocking: %s", PQerrorMessage(pg->conn));
        PQfinish(pg->conn);
        pg->conn = NULL;
        return -1;
    }
    pg->broken = false;
    pg_watch(pg, EV_READ);
    return 0;
}

/* A reconnect that failed: the connection stays broken (the caller's next
 * crier_pg_reconnect starts another). */
static void pg_connect_failed(crier_pg *pg, const char *why)
{
    crier_warn("pg", "%s connection: cannot reconnect: %s", pg->name, why);
    ev_timer_stop(pg->loop, &pg->connect_deadline);
    pg_watch(pg, 0);
    pg->connecting = false;
    pg->setting_up = false;
    pg->broken = true;
}

static void pg_connect_deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_pg *pg = w->data;
    (void)loop;
    (void)revents;
    if (pg->connecting)
        pg_connect_failed(pg, "no answer within 10 s");
}

/* The reconnect's setup statement completed: the connection is usable. */
static void pg_setup_done(void *ud, PGresult *res, const char *err)
{
    crier_pg *pg = ud;
    pg->setting_up = false;
    pg->connecting = false;
    ev_timer_stop(pg->loop, &pg->connect_deadline);
    if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
        pg_connect_failed(pg, res ? PQresultErrorMessage(res) : err);
        return;
    }
    crier_info("pg", "%s connection: reconnected", pg->name);
}

/* One step of a nonblocking connect (PQconnectPoll), on the socket's readiness. */
static void pg_connect_step(crier_pg *pg)
{
    switch (PQconnectPoll(pg->conn)) {
    case PGRES_POLLING_READING:
        pg_watch(pg, EV_READ);
        return;
    case PGRES_POLLING_WRITING:
        pg_watch(pg, EV_WRITE);
        return;
    case PGRES_POLLING_FAILED:
        pg_connect_failed(pg, PQerrorMessage(pg->conn));
        return;
    default: /* PGRES_POLLING_OK */
        break;
    }
    if (PQsetnonblocking(pg->conn, 1) != 0) {
        pg_connect_failed(pg, PQerrorMessage(pg->conn));
        return;
    }
    /* connected: its setup statement, through the ordinary query path */
    pg->broken = false;
    pg->setting_up = true;
    pg_watch(pg, EV_READ);
    if (crier_pg_query(pg, SQL_SETUP, NULL, pg_setup_done, pg) < 0)
        pg_connect_failed(pg, PQerrorMessage(pg->conn));
}

crier_pg *crier_pg_connect(struct ev_loop *loop, const char *conninfo, const char *name, char *err,
                           size_t err_len)
{
    crier_pg *pg = calloc(1, sizeof *pg);
    if (!pg) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    pg->loop = loop;
    pg->conninfo = strdup(conninfo);
    snprintf(pg->name, sizeof pg->name, "%s", name);
    ev_init(&pg->io, pg_io_cb);
    pg->io.data = pg;
    ev_init(&pg->connect_deadline, pg_connect_deadline_cb);
    pg->connect_deadline.data = pg;
    if (!pg->conninfo || pg_open(pg, err, err_len) < 0) {
        free(pg->conninfo);
        free(pg);
        return NULL;
    }
    return pg;
}

/* Whether a query may be sent now (else logged). */
static bool pg_may_send(crier_pg *pg)
{
    if (pg->busy || pg->broken) {
        crier_error("pg", "%s connection: query refused (%s)", pg->name, pg->busy ? "busy" : "broken");
        return false;
    }
    return true;
}

/* A query could not be sent: logged, and the connection marked broken if it is. */
static int pg_send_failed(crier_pg *pg)
{
    crier_error("pg", "%s connection: cannot send query: %s", pg->name, PQerrorMessage(pg->conn));
    pg->broken = PQstatus(pg->conn) == CONNECTION_BAD;
    pg->preparing = false;
    pg->copy_pending = false;
    return -1;
}

static int pg_sent(crier_pg *pg, crier_pg_result_fn cb, void *ud);

/* The position of the statement prepared as name on this connection, or
 * n_prepared when it is not (yet). */
static int pg_prepared_slot(const crier_pg *pg, const char *name)
{
    int slot;
    for (slot = 0; slot < pg->n_prepared; slot++)
        if (strcmp(pg->prepared[slot], name) == 0)
            break;
    return slot;
}

/* Queues sql with params as a one-shot query (extended protocol). Returns 1 or 0 (not queued). */
static int pg_send_params(crier_pg *pg, const char *sql, const crier_pg_params *params)
{
    return PQsendQueryParams(pg->conn, sql, params ? params->n : 0, NULL, params ? params->values : NULL,
                             params ? params->lengths : NULL, params ? params->formats : NULL, 0);
}

int crier_pg_query(crier_pg *pg, const char *sql, const crier_pg_params *params, crier_pg_result_fn cb,
                   void *ud)
{
    if (!pg_may_send(pg))
        return -1;
    if (!pg_send_params(pg, sql, params))
        return pg_send_failed(pg);
    return pg_sent(pg, cb, ud);
}

int crier_pg_query_script(crier_pg *pg, const char *sql, crier_pg_result_fn cb, void *ud)
{
    if (!pg_may_send(pg))
        return -1;
    if (!PQsendQuery(pg->conn, sql))
        return pg_send_failed(pg);
    return pg_sent(pg, cb, ud);
}

int crier_pg_copy_in(crier_pg *pg, const char *sql, const char *data, size_t len, crier_pg_result_fn cb,
                     void *ud)
{
    if (!pg_may_send(pg))
        return -1;
    if (!PQsendQuery(pg->conn, sql))
        return pg_send_failed(pg);
    pg->copy_data = data;
    pg->copy_len = len;
    pg->copy_sent = 0;
    pg->copy_pending = true;
    return pg_sent(pg, cb, ud);
}

int crier_pg_query_prepared(crier_pg *pg, const char *name, const char *sql, const crier_pg_params *params,
                            crier_pg_result_fn cb, void *ud)
{
    if (!pg_may_send(pg))
        return -1;
    int slot = pg_prepared_slot(pg, name);
    if (slot < pg->n_prepared) {
        if (pg_send_prepared(pg, name, params) < 0)
            return pg_send_failed(pg);
        return pg_sent(pg, cb, ud);
    }
    if (slot >= PG_MAX_PREPARED || strlen(name) >= PG_NAME_LEN) /* not kept: sent as a one-shot query */
        return crier_pg_query(pg, sql, params, cb, ud);
    /* PREPARE first (once per connection); its completion sends the execution */
    if (!PQsendPrepare(pg->conn, name, sql, params ? params->n : 0, NULL))
        return pg_send_failed(pg);
    snprintf(pg->prepared[slot], PG_NAME_LEN, "%s", name);
    pg->preparing = true;
    pg->preparing_slot = slot;
    pg->exec_params = params;
    return pg_sent(pg, cb, ud);
}

int crier_pg_query_prepared_commit(crier_pg *pg, const char *name, const char *sql,
                                   const crier_pg_params *params, crier_pg_result_fn cb, void *ud)
{
    if (!pg_may_send(pg))
        return -1;
    int slot = pg_prepared_slot(pg, name);
    bool keep = slot < PG_MAX_PREPARED && strlen(name) < PG_NAME_LEN;
    if (!PQenterPipelineMode(pg->conn))
        return pg_send_failed(pg);
    int n = 0, ok = 1;
    pg->pipe_prepare_slot = -1;
    if (keep && slot >= pg->n_prepared) { /* PREPARE first, in the same round trip */
        ok = PQsendPrepare(pg->conn, name, sql, params ? params->n : 0, NULL);
        snprintf(pg->prepared[slot], PG_NAME_LEN, "%s", name);
        pg->pipe_prepare_slot = slot;
        n++;
    }
    if (ok)
        ok = keep ? pg_send_prepared(pg, name, params) == 0 : pg_send_params(pg, sql, params);
    n++;
    if (ok)
        ok = pg_send_params(pg, "COMMIT", NULL);
    n++;
    if (ok)
        ok = PQpipelineSync(pg->conn);
    if (!ok) {
        int r = pg_send_failed(pg);
        pg->broken = true; /* queries may be queued in the pipeline: start over on a new connection */
        return r;
    }
    pg->pipeline = true;
    pg->pipe_n = n;
    pg->pipe_at = 0;
    return pg_sent(pg, cb, ud);
}

/* Bookkeeping after a query was sent: its callback, the flush, the watcher. */
static int pg_sent(crier_pg *pg, crier_pg_result_fn cb, void *ud)
{
    pg->busy = true;
    pg->cb = cb;
    pg->cb_ud = ud;
    int r = PQflush(pg->conn);
    if (r < 0) {
        pg->busy = false;
        pg->cb = NULL;
        pg->broken = true;
        pg->preparing = false;
        pg->copy_pending = false;
        pg_pipeline_clear(pg);
        crier_error("pg", "%s connection: cannot send query: %s", pg->name, PQerrorMessage(pg->conn));
        return -1;
    }
    pg_watch(pg, r == 1 ? (EV_READ | EV_WRITE) : EV_READ);
    return 0;
}

bool crier_pg_idle(const crier_pg *pg)
{
    return !pg->busy && !pg->broken && !pg->connecting;
}

void crier_pg_keep_result(crier_pg *pg)
{
    pg->keep_result = true;
}

bool crier_pg_ok(const crier_pg *pg)
{
    return !pg->broken && !pg->connecting && pg->conn && PQstatus(pg->conn) == CONNECTION_OK;
}

int crier_pg_reconnect(crier_pg *pg)
{
    if (crier_pg_ok(pg))
        return 0;
    if (pg->connecting)
        return -1; /* under way */
    pg_watch(pg, 0);
    PQclear(pg->last);
    pg->last = NULL;
    pg->busy = false;
    pg->cb = NULL;
    pg->preparing = false;
    pg->copy_pending = pg->copying = false;
    pg->n_prepared = 0; /* a new session: nothing is prepared on it */
    if (pg->conn)
        PQfinish(pg->conn);
    pg->broken = true;
    pg->conn = pg_start(pg, false);
    if (!pg->conn || PQstatus(pg->conn) == CONNECTION_BAD) {
        crier_warn("pg", "%s connection: cannot reconnect: %s", pg->name,
                   pg->conn ? PQerrorMessage(pg->conn) : "out of memory");
        return -1;
    }
    pg->connecting = true;
    ev_timer_set(&pg->connect_deadline, PG_RECONNECT_DEADLINE, 0.);
    ev_timer_start(pg->loop, &pg->connect_deadline);
    pg_watch(pg, EV_WRITE); /* PQconnectStart's first poll waits to write */
    return -1;
}

double crier_pg_retry_after(const crier_pg *pg, double retry_s)
{
    return pg->connecting ? 0.05 : retry_s;
}

void crier_pg_on_notify(crier_pg *pg, crier_pg_notify_fn fn, void *ud)
{
    pg->notify = fn;
    pg->notify_ud = ud;
}

PGconn *crier_pg_conn(crier_pg *pg)
{
    return pg->conn;
}

void crier_pg_free(crier_pg *pg)
{
    if (!pg)
        return;
    pg_watch(pg, 0);
    ev_timer_stop(pg->loop, &pg->connect_deadline);
    PQclear(pg->last);
    if (pg->conn)
        PQfinish(pg->conn);
    free(pg->conninfo);
    free(pg);
}
