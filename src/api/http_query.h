/* http_query.h — a request's database work: its pooled connection, the
 * transaction the router wraps a handler in (committed only when the answer
 * is a success, so an error changes nothing), and the statements handlers run
 * on it, with a failure turned into the right error response.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_pool, http_request; log (base).
 */
#ifndef CRIER_HTTP_QUERY_H
#define CRIER_HTTP_QUERY_H

#include "http_request.h"

#include <libpq-fe.h>
#include <stddef.h>

/* Takes a database connection for a handler that runs without the
 * router's transaction (health, metrics), waiting up to wait_s seconds.
 * Returns 0 (also when r holds one already), or -1 with err set and no
 * error response (the caller decides). */
int crier_http_db_acquire(crier_http_request *r, double wait_s, char *err, size_t err_len);

/* Gives the request's connection back to the pool (a broken one is replaced
 * on the next acquire). No-op without one. */
void crier_http_db_release(crier_http_request *r);

/* Opens the request's transaction on a pooled connection (a connection found
 * broken is replaced once). Returns 0, or -1 with 503 busy or
 * database_unavailable set. */
int crier_http_txn_begin(crier_http_request *r);

/* Ends the request's transaction: commits when the response is a success
 * (a failed commit turns it into a 503), rolls back otherwise, and gives the
 * connection back. Safe without a transaction or a connection. */
void crier_http_txn_finish(crier_http_request *r);

/* Runs a tenant-scoped statement on the request's connection: sql's $1 is
 * always the request's tenant (r->tenant, set by authentication) and the n
 * text values[0..n) are $2..$(n+1), so a handler cannot forget to scope a
 * statement to its tenant, nor scope it to another. Every statement that
 * reads or changes a tenant's rows goes through here or its prepared twin.
 * Returns the result (the caller clears it), or NULL with an error response
 * set (crier_http_error_from_result; a 500 without running anything when the
 * request has no tenant or more than CRIER_HTTP_QUERY_MAX_VALUES values). */
#define CRIER_HTTP_QUERY_MAX_VALUES 15
PGresult *crier_http_query_tenant(crier_http_request *r, const char *sql, int n,
                                  const char *const *values);

/* The same for a hot statement, prepared once per pooled connection (so it
 * is parsed and, where PostgreSQL's plan cache decides so, planned once).
 * id (0..31, one per statement text) names it. */
enum { CRIER_HTTP_STMT_FEED_FIRST_PAGE, CRIER_HTTP_STMT_EMIT };
PGresult *crier_http_query_tenant_prepared(crier_http_request *r, int id, const char *sql, int n,
                                           const char *const *values);

/* Runs sql with n text parameters as they are, for the statements that are
 * not about one tenant's rows (say why beside each call: finding the tenant
 * of a credential, parsing a body, a snapshot, maintenance across tenants).
 * Returns like crier_http_query_tenant. */
PGresult *crier_http_query(crier_http_request *r, const char *sql, int n,
                           const char *const *values);

/* GET of one object by the id in path segment 2: runs sql (through
 * crier_http_query_tenant) with ($1 tenant, $2 id), which returns one JSON
 * value (NULL when the tenant has no such object), and answers it, or 404
 * "no <what> <id>" (another tenant's object is not found, like a missing
 * one). Returns 0 or -1 like a handler. */
int crier_http_get_by_id(crier_http_request *r, const char *what, const char *sql);

#endif
