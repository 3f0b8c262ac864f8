/* http_query.c — a request's connection, transaction and statements (see
 * http_query.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_query.h"

#include "http_pool.h"
#include "log.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define QUERY_DB_WAIT 10.0 /* seconds a request waits for a free database connection */

int crier_http_db_acquire(crier_http_request *r, double wait_s, char *err, size_t err_len)
{
    if (r->pg)
        return 0;
    if (crier_http_pool_take(r->ctx->pool, wait_s, &r->pg_slot, &r->pg, err, err_len) < 0) {
        r->pg = NULL;
        return -1;
    }
    return 0;
}

void crier_http_db_release(crier_http_request *r)
{
    if (!r->pg)
        return;
    crier_http_pool_give(r->ctx->pool, r->pg_slot);
    r->pg = NULL;
    r->in_txn = false;
}

int crier_http_txn_begin(crier_http_request *r)
{
    char err[512];
    /* a connection found broken (the server restarted, the backend was
     * terminated) is replaced once */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (crier_http_db_acquire(r, QUERY_DB_WAIT, err, sizeof err) < 0) {
            bool busy = strstr(err, "busy") != NULL;
            return crier_http_error(r, 503, busy ? "busy" : "database_unavailable", "%s", err);
        }
        PGresult *res = PQexec(r->pg, "BEGIN");
        bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
        if (ok) {
            r->in_txn = true;
            return 0;
        }
        snprintf(err, sizeof err, "%s", PQerrorMessage(r->pg));
        crier_http_db_release(r); /* a broken connection is dropped and replaced */
    }
    crier_warn("http", "request %llu: cannot begin a transaction: %s", r->id, err);
    return crier_http_error(r, 503, "database_unavailable",
                            "the database is unavailable; retry later");
}

void crier_http_txn_finish(crier_http_request *r)
{
    if (r->parsed) {
        PQclear(r->parsed);
        r->parsed = NULL;
    }
    if (r->pg && r->in_txn) {
        bool commit = r->status > 0 && r->status < 400;
        PGresult *res = PQexec(r->pg, commit ? "COMMIT" : "ROLLBACK");
        if (commit && PQresultStatus(res) != PGRES_COMMAND_OK) {
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            crier_warn("http", "request %llu: commit failed: %s", r->id, PQerrorMessage(r->pg));
            r->replayed = false;
            if (state && (!strcmp(state, "40001") || !strcmp(state, "40P01")))
                crier_http_error(r, 503, "conflict_retry", "a concurrent change conflicted; retry");
            else
                crier_http_error(r, 503, "database_unavailable",
                                 "the change could not be committed; retry");
        }
        PQclear(res);
        r->in_txn = false;
    }
    crier_http_db_release(r);
}

/* res when the statement succeeded; else NULL with the error response set
 * (res is cleared). */
static PGresult *query_result(crier_http_request *r, PGresult *res)
{
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return res;
    crier_http_error_from_result(r, res);
    PQclear(res);
    return NULL;
}

/* crier_http_query for a statement prepared once per pooled connection (id
 * names it: 0..31). */
static PGresult *query_prepared(crier_http_request *r, int id, const char *sql, int n,
                                const char *const *values)
{
    char name[24];
    PGresult *res;
    if (!r->pg || id < 0 || id > 31)
        return crier_http_query(r, sql, n, values);
    snprintf(name, sizeof name, "crier_api_%d", id);
    uint32_t *prepared = crier_http_pool_prepared(r->ctx->pool, r->pg_slot);
    if (!(*prepared & (1u << id))) {
        /* session-level: kept when the request's transaction rolls back */
        res = PQprepare(r->pg, name, sql, n, NULL);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            crier_http_error_from_result(r, res);
            PQclear(res);
            return NULL;
        }
        PQclear(res);
        *prepared |= 1u << id;
    }
    return query_result(r, PQexecPrepared(r->pg, name, n, values, NULL, NULL, 0));
}

PGresult *crier_http_query(crier_http_request *r, const char *sql, int n, const char *const *values)
{
    if (!r->pg) {
        crier_http_error(r, 500, "internal_error", "no database connection (request id %llu)",
                         r->id);
        return NULL;
    }
    return query_result(r, PQexecParams(r->pg, sql, n, NULL, values, NULL, NULL, 0));
}

int crier_http_get_by_id(crier_http_request *r, const char *what, const char *sql)
{
    long long id = 0;
    char id_text[24], field[64];
    const char *values[1];
    PGresult *res;

    snprintf(field, sizeof field, "the %s id", what);
    if (crier_http_path_id(r, r->segments[2], field, &id) < 0)
        return -1;
    snprintf(id_text, sizeof id_text, "%lld", id);
    values[0] = id_text;
    res = crier_http_query_tenant(r, sql, 1, values);
    if (!res)
        return -1;
    if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
        PQclear(res);
        return crier_http_error(r, 404, "not_found", "no %s %lld", what, id);
    }
    crier_http_reply(r, 200, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
    PQclear(res);
    return 0;
}

/* Fills all[0..n] with the request's tenant and values[0..n). Returns 0, or
 * -1 with a 500 set (no tenant: the route is not authenticated; too many
 * values). */
static int query_tenant_values(crier_http_request *r, int n, const char *const *values,
                               const char **all)
{
    if (!r->tenant[0] || n < 0 || n > CRIER_HTTP_QUERY_MAX_VALUES) {
        crier_error("http", "request %llu (%s %s): a tenant-scoped statement without %s", r->id,
                    r->method, r->path, r->tenant[0] ? "room for its values" : "a tenant");
        return crier_http_error(r, 500, "internal_error",
                                "internal error; see the server log for request id %llu", r->id);
    }
    all[0] = r->tenant;
    for (int i = 0; i < n; i++)
        all[i + 1] = values[i];
    return 0;
}

PGresult *crier_http_query_tenant(crier_http_request *r, const char *sql, int n,
                                  const char *const *values)
{
    const char *all[CRIER_HTTP_QUERY_MAX_VALUES + 1];
    if (query_tenant_values(r, n, values, all) < 0)
        return NULL;
    return crier_http_query(r, sql, n + 1, all);
}

PGresult *crier_http_query_tenant_prepared(crier_http_request *r, int id, const char *sql, int n,
                                           const char *const *values)
{
    const char *all[CRIER_HTTP_QUERY_MAX_VALUES + 1];
    if (query_tenant_values(r, n, values, all) < 0)
        return NULL;
    return query_prepared(r, id, sql, n + 1, all);
}
