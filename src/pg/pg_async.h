/* pg_async.h — one nonblocking libpq connection on a libev loop: one query in
 * flight at a time (PQsendQueryParams, PQflush, PQconsumeInput, PQisBusy), its
 * result handed to a callback, and LISTEN/NOTIFY notifications to another;
 * COPY … FROM STDIN of rows built in memory.
 *
 * Layer: pg (src/pg/), may use base.
 * Calls into: log (base), pg_array.
 */
#ifndef CRIER_PG_ASYNC_H
#define CRIER_PG_ASYNC_H

#include "pg_array.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

struct ev_loop;

typedef struct crier_pg crier_pg;

/* Result callback. res is the query's last result (owned by the callee: the
 * connection clears it after the callback returns), or NULL when the connection
 * failed; err then says why. Called from the loop, never from crier_pg_query. */
typedef void (*crier_pg_result_fn)(void *ud, PGresult *res, const char *err);
/* Called for each NOTIFY received on a channel this connection LISTENs to. */
typedef void (*crier_pg_notify_fn)(void *ud, const char *channel, const char *payload);

/* Connects (blocking: at startup, before the loop runs) and switches the
 * connection to nonblocking mode. name labels log lines. Returns NULL with err set on failure. */
crier_pg *crier_pg_connect(struct ev_loop *loop, const char *conninfo, const char *name,
                           char *err, size_t err_len);

/* Sends a query with params (NULL: none; text or binary parameters, text
 * results). The parameter values must stay valid until the callback runs.
 * Returns 0 if sent, -1 if a query is already in flight or the connection is
 * broken (err logged). */
int crier_pg_query(crier_pg *pg, const char *sql, const crier_pg_params *params, crier_pg_result_fn cb,
                   void *ud);

/* Sends several statements separated by semicolons, without parameters, in
 * one round trip (the simple query protocol; no value may come from outside
 * the program). The callback gets the last statement's result, or the first
 * error (the statements after it do not run). */
int crier_pg_query_script(crier_pg *pg, const char *sql, crier_pg_result_fn cb, void *ud);

/* crier_pg_query for a statement that runs again and again: prepared once
 * per connection under name (a PREPARE round trip before its first run, and
 * again after a reconnect), then executed by name, so the server parses it
 * once and may keep a generic plan (PostgreSQL's plan_cache_mode decides:
 * write such statements so that any plan of them is sound for any size).
 * name identifies sql on this connection; at most 16 names are kept, further
 * ones run as one-shot queries. The callback gets the execution's result, or
 * the PREPARE's error. */
int crier_pg_query_prepared(crier_pg *pg, const char *name, const char *sql, const crier_pg_params *params,
                            crier_pg_result_fn cb, void *ud);

/* crier_pg_query_prepared followed by COMMIT in the same round trip (libpq's
 * pipeline mode; a PREPARE, when needed, goes in it too): for the last
 * statement of a transaction. The callback runs with the statement's result;
 * if that is an error, only then (the COMMIT did not run: the transaction is
 * aborted, ROLLBACK it). Otherwise it runs a second time with the COMMIT's
 * result (or NULL and err). During the first call no query may be sent (it
 * would be refused); from the second the connection is idle. */
int crier_pg_query_prepared_commit(crier_pg *pg, const char *name, const char *sql,
                                   const crier_pg_params *params, crier_pg_result_fn cb, void *ud);

/* Sends sql, a COPY … FROM STDIN, then the len bytes at data (rows in COPY's
 * format, pg_copy.h) and the end of the copy, without blocking the loop. data
 * must stay valid until the callback runs; the callback gets the COPY's
 * result (COMMAND_OK, or the error that refused a row). Returns as
 * crier_pg_query. */
int crier_pg_copy_in(crier_pg *pg, const char *sql, const char *data, size_t len, crier_pg_result_fn cb,
                     void *ud);

/* Called from a result callback of pg: the callee keeps that callback's
 * result (and PQclears it itself) instead of the connection clearing it when
 * the callback returns. */
void crier_pg_keep_result(crier_pg *pg);

/* True when the connection is usable. */
bool crier_pg_ok(const crier_pg *pg);

/* True when the connection is usable and no query is in flight (a
 * crier_pg_query now would be sent). */
bool crier_pg_idle(const crier_pg *pg);

/* Re-establishes a broken connection without blocking the loop: returns 0
 * when the connection is usable, else -1 and starts a connection attempt (or
 * lets the one under way go on: it connects on the loop, then runs its setup
 * statement, and is abandoned after 10 s). Call it again later (the callers'
 * retry timers do) to learn whether it worked. */
int crier_pg_reconnect(crier_pg *pg);

/* How long to wait before calling crier_pg_reconnect again after it returned
 * -1: briefly while an attempt is under way, else retry_s. */
double crier_pg_retry_after(const crier_pg *pg, double retry_s);

/* Sets the NOTIFY callback (called between queries as notifications arrive). */
void crier_pg_on_notify(crier_pg *pg, crier_pg_notify_fn fn, void *ud);

/* The underlying connection, for escaping helpers and blocking setup statements
 * before the loop runs. */
PGconn *crier_pg_conn(crier_pg *pg);

/* Closes the connection and frees pg. NULL is a no-op. */
void crier_pg_free(crier_pg *pg);

#endif
