/* http_pool.c — the HTTP API's PostgreSQL connections and their pool (see
 * http_pool.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_pool.h"

#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct crier_http_pool {
    char *conninfo;
    PGconn **conns;
    bool *busy;
    uint32_t *prepared; /* per connection: the statements prepared on it (bit = id) */
    int n_conns;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

static void pool_notice_ignore(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

PGconn *crier_http_db_connect(const char *conninfo, const char *app, char *err, size_t err_len)
{
    static const char *const keys[] = {"dbname", "fallback_application_name", "connect_timeout",
                                       NULL};
    const char *values[] = {conninfo, app, "5", NULL};
    PGconn *c = PQconnectdbParams(keys, values, 1);
    if (PQstatus(c) != CONNECTION_OK) {
        crier_set_error(err, err_len, "cannot connect to the database: %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    PQsetNoticeProcessor(c, pool_notice_ignore, NULL);
    PGresult *res =
        PQexec(c, "SET statement_timeout = '30s'; SET lock_timeout = '10s';"
                  " SET idle_in_transaction_session_timeout = '60s'; SET TimeZone = 'UTC';"
                  " SET client_min_messages = warning");
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        crier_set_error(err, err_len, "cannot set up the database session: %s", PQerrorMessage(c));
        PQclear(res);
        PQfinish(c);
        return NULL;
    }
    PQclear(res);
    return c;
}

static PGconn *pool_connect(crier_http_pool *pool, char *err, size_t err_len)
{
    return crier_http_db_connect(pool->conninfo, "crier-api", err, err_len);
}

/* Takes a free slot (waiting up to wait_s) and makes sure it holds a live
 * connection. Returns 0, or -1 with err set. */
int crier_http_pool_take(crier_http_pool *pool, double wait_s, int *slot, PGconn **conn, char *err,
                         size_t err_len)
{
    struct timespec deadline;
    int s = -1;

    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)wait_s;
    deadline.tv_nsec += (long)((wait_s - (double)(time_t)wait_s) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        for (int i = 0; i < pool->n_conns; i++) {
            if (!pool->busy[i]) {
                s = i;
                break;
            }
        }
        if (s >= 0 || pthread_cond_timedwait(&pool->cond, &pool->lock, &deadline) == ETIMEDOUT)
            break;
    }
    if (s >= 0)
        pool->busy[s] = true;
    pthread_mutex_unlock(&pool->lock);
    if (s < 0) {
        crier_set_error(err, err_len, "every database connection of the API is busy; retry");
        return -1;
    }
    /* the slot is ours alone: connect outside the lock */
    if (pool->conns[s] && PQstatus(pool->conns[s]) != CONNECTION_OK) {
        PQfinish(pool->conns[s]);
        pool->conns[s] = NULL;
    }
    if (!pool->conns[s])
        pool->prepared[s] = 0; /* a new connection has no prepared statement */
    if (!pool->conns[s] && !(pool->conns[s] = pool_connect(pool, err, err_len))) {
        pthread_mutex_lock(&pool->lock);
        pool->busy[s] = false;
        pthread_cond_signal(&pool->cond);
        pthread_mutex_unlock(&pool->lock);
        return -1;
    }
    *slot = s;
    *conn = pool->conns[s];
    return 0;
}

void crier_http_pool_give(crier_http_pool *pool, int slot)
{
    /* a connection that broke, or was left in a transaction, is replaced */
    PGconn *c = pool->conns[slot];
    if (c && (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_IDLE)) {
        PQfinish(c);
        pool->conns[slot] = NULL;
    }
    pthread_mutex_lock(&pool->lock);
    pool->busy[slot] = false;
    pthread_cond_signal(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
}

crier_http_pool *crier_http_pool_start(const char *conninfo, int n, char *err, size_t err_len)
{
    crier_http_pool *pool = calloc(1, sizeof *pool);
    pthread_condattr_t cattr;

    if (!pool) {
        crier_set_error(err, err_len, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&pool->lock, NULL);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&pool->cond, &cattr);
    pthread_condattr_destroy(&cattr);
    pool->n_conns = n;
    pool->conninfo = strdup(conninfo ? conninfo : "");
    pool->conns = calloc((size_t)n, sizeof *pool->conns);
    pool->busy = calloc((size_t)n, sizeof *pool->busy);
    pool->prepared = calloc((size_t)n, sizeof *pool->prepared);
    if (!pool->conninfo || !pool->conns || !pool->busy || !pool->prepared) {
        crier_set_error(err, err_len, "out of memory");
        goto fail;
    }
    if (!(pool->conns[0] = pool_connect(pool, err, err_len)))
        goto fail;
    return pool;

fail:
    crier_http_pool_stop(pool);
    return NULL;
}

uint32_t *crier_http_pool_prepared(crier_http_pool *pool, int slot)
{
    return &pool->prepared[slot];
}

void crier_http_pool_stop(crier_http_pool *pool)
{
    if (!pool)
        return;
    for (int i = 0; i < pool->n_conns; i++)
        if (pool->conns && pool->conns[i])
            PQfinish(pool->conns[i]);
    free(pool->conns);
    free(pool->busy);
    free(pool->prepared);
    free(pool->conninfo);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->cond);
    free(pool);
}
