/* pg_async.c — nonblocking libpq on libev, one query in flight (see pg_async.h). */
#include "pg_async.h"

#include "log.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct crier_pg {
    struct ev_loop *loop;
    PGconn *conn;
    char *conninfo;
    char name[32];
    ev_io io;
    bool io_active;
    bool busy;
    bool broken;
    PGresult *last; /* the latest result of the query in flight */
    crier_pg_result_fn cb;
    void *cb_ud;
    crier_pg_notify_fn notify;
    void *notify_ud;
};

static void pg_watch(crier_pg *pg, int events)
{
    if (pg->io_active) {
        if ((pg->io.events & (EV_READ | EV_WRITE)) == events)
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

/* Marks the connection broken and fails the query in flight. */
static void pg_fail(crier_pg *pg, const char *what)
{
    char msg[512];
    crier_pg_result_fn cb = pg->cb;
    void *ud = pg->cb_ud;

    snprintf(msg, sizeof msg, "%s: %s", what, PQerrorMessage(pg->conn));
    crier_error("pg", "%s connection: %s", pg->name, msg);
    pg->broken = true;
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

static void pg_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    crier_pg *pg = w->data;

    if (revents & EV_WRITE) {
        int r = PQflush(pg->conn);
        if (r < 0) {
            pg_fail(pg, "sending the query failed");
            return;
        }
        if (r == 0)
            pg_watch(pg, EV_READ);
    }
    if (!(revents & EV_READ))
        return;
    if (!PQconsumeInput(pg->conn)) {
        pg_fail(pg, "reading from the server failed");
        return;
    }
    pg_dispatch_notifies(pg);
    while (pg->busy && !PQisBusy(pg->conn)) {
        PGresult *res = PQgetResult(pg->conn);
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
        crier_pg_result_fn cb = pg->cb;
        void *ud = pg->cb_ud;
        PGresult *last = pg->last;
        pg->last = NULL;
        pg->busy = false;
        pg->cb = NULL;
        if (cb)
            cb(ud, last, last ? NULL : "query returned no result");
        PQclear(last);
        pg_dispatch_notifies(pg);
        if (PQstatus(pg->conn) == CONNECTION_BAD) {
            pg_fail(pg, "connection lost");
            return;
        }
        break;
    }
    (void)loop;
}

static int pg_open(crier_pg *pg, char *err, size_t err_len)
{
    /* pg_stat_activity names the worker and its connection ("crier timers 4242"),
     * unless the connection string sets application_name itself */
    char app[96];
    const char *const keys[] = {"dbname", "fallback_application_name", NULL};
    const char *values[] = {pg->conninfo, app, NULL};
    snprintf(app, sizeof app, "crier %s %d", pg->name, (int)getpid());
    pg->conn = PQconnectdbParams(keys, values, 1);
    if (PQstatus(pg->conn) != CONNECTION_OK) {
        snprintf(err, err_len, "cannot connect to the database: %s", PQerrorMessage(pg->conn));
        PQfinish(pg->conn);
        pg->conn = NULL;
        return -1;
    }
    /* No JIT for the engine's statements: they are batches of a few thousand
     * rows, run in tens of ms, and JIT compiled the fan-out's write on every
     * full batch (its estimate crosses jit_above_cost) for 40-90 ms, more than
     * the statement's own work (docs/BENCHMARKS.md, Pipeline). */
    PGresult *res = PQexec(pg->conn, "SET jit = off");
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
    if (!pg->conninfo || pg_open(pg, err, err_len) < 0) {
        free(pg->conninfo);
        free(pg);
        return NULL;
    }
    return pg;
}

int crier_pg_query(crier_pg *pg, const char *sql, const crier_pg_params *params, crier_pg_result_fn cb,
                   void *ud)
{
    if (pg->busy || pg->broken) {
        crier_error("pg", "%s connection: query refused (%s)", pg->name, pg->busy ? "busy" : "broken");
        return -1;
    }
    if (!PQsendQueryParams(pg->conn, sql, params ? params->n : 0, NULL, params ? params->values : NULL,
                           params ? params->lengths : NULL, params ? params->formats : NULL, 0)) {
        crier_error("pg", "%s connection: cannot send query: %s", pg->name, PQerrorMessage(pg->conn));
        pg->broken = PQstatus(pg->conn) == CONNECTION_BAD;
        return -1;
    }
    pg->busy = true;
    pg->cb = cb;
    pg->cb_ud = ud;
    int r = PQflush(pg->conn);
    if (r < 0) {
        pg->busy = false;
        pg->cb = NULL;
        pg->broken = true;
        crier_error("pg", "%s connection: cannot send query: %s", pg->name, PQerrorMessage(pg->conn));
        return -1;
    }
    pg_watch(pg, r == 1 ? (EV_READ | EV_WRITE) : EV_READ);
    return 0;
}

bool crier_pg_idle(const crier_pg *pg)
{
    return !pg->busy && !pg->broken;
}

bool crier_pg_ok(const crier_pg *pg)
{
    return !pg->broken && pg->conn && PQstatus(pg->conn) == CONNECTION_OK;
}

int crier_pg_reconnect(crier_pg *pg)
{
    char err[512];

    if (crier_pg_ok(pg))
        return 0;
    pg_watch(pg, 0);
    if (pg->conn)
        PQfinish(pg->conn);
    pg->conn = NULL;
    if (pg_open(pg, err, sizeof err) < 0) {
        crier_warn("pg", "%s connection: %s", pg->name, err);
        pg->broken = true;
        return -1;
    }
    crier_info("pg", "%s connection: reconnected", pg->name);
    return 0;
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
    PQclear(pg->last);
    if (pg->conn)
        PQfinish(pg->conn);
    free(pg->conninfo);
    free(pg);
}
