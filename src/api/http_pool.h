/* http_pool.h — the HTTP API's PostgreSQL connections: how one is opened
 * (blocking, with the session's timeouts and UTC), and a fixed pool of them,
 * one per request thread, that a request takes and gives back (a connection
 * found broken is replaced on the next take). The pool also remembers which
 * hot statements are prepared on each connection (crier_http_query_prepared).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: log (base).
 */
#ifndef CRIER_HTTP_POOL_H
#define CRIER_HTTP_POOL_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

typedef struct crier_http_pool crier_http_pool;

/* Connects to the database for the API (application name app) and sets up
 * the session (timeouts, UTC). Returns the connection (the caller PQfinish-es
 * it), or NULL with err set when it cannot. */
PGconn *crier_http_db_connect(const char *conninfo, const char *app, char *err, size_t err_len);

/* Makes a pool of n connections to conninfo and opens the first one now, so
 * that an unreachable database fails at start rather than at the first
 * request. Returns the pool (crier_http_pool_stop frees it), or NULL with err
 * set (out of memory, no database). */
crier_http_pool *crier_http_pool_start(const char *conninfo, int n, char *err, size_t err_len);

/* Takes a free slot, waiting up to wait_s seconds for one, and makes sure it
 * holds a live connection (connecting outside the pool's lock). Returns 0
 * with *slot and *conn set, or -1 with err set: every connection busy (the
 * message says "busy"), or the database cannot be reached. */
int crier_http_pool_take(crier_http_pool *pool, double wait_s, int *slot, PGconn **conn, char *err,
                         size_t err_len);

/* Gives slot back; a connection that broke, or was left in a transaction,
 * is closed (the next take of the slot connects afresh). */
void crier_http_pool_give(crier_http_pool *pool, int slot);

/* The statements prepared on slot's connection (bit i: statement id i),
 * reset to 0 whenever the slot gets a new connection. Only the slot's
 * current taker may read or change it. */
uint32_t *crier_http_pool_prepared(crier_http_pool *pool, int slot);

/* Closes every connection and frees pool (no slot may be taken any more).
 * NULL is a no-op. */
void crier_http_pool_stop(crier_http_pool *pool);

#endif
