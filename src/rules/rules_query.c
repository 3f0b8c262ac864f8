/* rules_query.c — the rules' read-only query runner (see rules_query.h). */
#include "rules_query.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct crier_rules_query {
    char *conninfo;
    int timeout_ms;
    PGconn *conn;
};

crier_rules_query *crier_rules_query_new(const char *conninfo, int timeout_ms)
{
    crier_rules_query *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->conninfo = strdup(conninfo ? conninfo : "");
    q->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    if (!q->conninfo) {
        free(q);
        return NULL;
    }
    return q;
}

static int rules_query_exec(PGconn *conn, const char *sql, char *err, size_t err_len)
{
    PGresult *res = PQexec(conn, sql);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        snprintf(err, err_len, "%s", PQresultErrorMessage(res));
    PQclear(res);
    return ok ? 0 : -1;
}

static int rules_query_connect(crier_rules_query *q, char *err, size_t err_len)
{
    char setup[160];
    if (q->conn && PQstatus(q->conn) == CONNECTION_OK)
        return 0;
    if (q->conn)
        PQfinish(q->conn);
    q->conn = PQconnectdb(q->conninfo);
    if (PQstatus(q->conn) != CONNECTION_OK) {
        snprintf(err, err_len, "cannot connect for rule queries: %s", PQerrorMessage(q->conn));
        PQfinish(q->conn);
        q->conn = NULL;
        return -1;
    }
    snprintf(setup, sizeof setup,
             "SET default_transaction_read_only = on; SET statement_timeout = %d;"
             " SET application_name = 'crier rules'",
             q->timeout_ms);
    if (rules_query_exec(q->conn, setup, err, err_len) < 0) {
        PQfinish(q->conn);
        q->conn = NULL;
        return -1;
    }
    return 0;
}

PGresult *crier_rules_query_run(void *ud, const char *sql, int n, const char *const *values, char *err,
                                size_t err_len)
{
    crier_rules_query *q = ud;
    if (rules_query_connect(q, err, err_len) < 0)
        return NULL;
    /* Each statement in its own READ ONLY transaction, rolled back: nothing a
     * query does (a SET, a function with side effects) outlives it. */
    if (rules_query_exec(q->conn, "BEGIN READ ONLY", err, err_len) < 0)
        return NULL;
    PGresult *res = PQexecParams(q->conn, sql, n, NULL, values, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "%s",
                 PQresultStatus(res) == PGRES_COMMAND_OK ? "the statement returned no rows (use a SELECT)"
                                                         : PQresultErrorMessage(res));
        size_t len = strlen(err);
        while (len > 0 && (err[len - 1] == '\n' || err[len - 1] == ' '))
            err[--len] = '\0';
        PQclear(res);
        res = NULL;
    }
    char ignored[256];
    if (rules_query_exec(q->conn, "ROLLBACK", ignored, sizeof ignored) < 0)
        crier_warn("rules", "rule query connection: ROLLBACK failed: %s", ignored);
    return res;
}

void crier_rules_query_free(crier_rules_query *q)
{
    if (!q)
        return;
    if (q->conn)
        PQfinish(q->conn);
    free(q->conninfo);
    free(q);
}
