/* rules_query.c — the rules' read-only query runner (see rules_query.h). */
#include "rules_query.h"

#include "log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct crier_rules_query {
    char *conninfo;
    int timeout_ms;
    crier_rules_query_role role;
    PGconn *conn;
};

crier_rules_query *crier_rules_query_new(const char *conninfo, int timeout_ms, crier_rules_query_role role)
{
    crier_rules_query *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->conninfo = strdup(conninfo ? conninfo : "");
    q->timeout_ms = timeout_ms > 0 ? timeout_ms : 5000;
    q->role = role;
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

/* What the connected role may do beyond the data granted to it: one row of
 * the role's name and a comma-separated list of powers ("" when none). */
static const char SQL_PRIVILEGES[] =
    "SELECT current_user, concat_ws(', ',"
    " CASE WHEN r.rolsuper THEN 'is a superuser' END,"
    " CASE WHEN pg_has_role(current_user, 'pg_execute_server_program', 'USAGE')"
    "      THEN 'runs programs on the server (pg_execute_server_program)' END,"
    " CASE WHEN pg_has_role(current_user, 'pg_read_server_files', 'USAGE')"
    "      THEN 'reads the server''s files (pg_read_server_files)' END,"
    " CASE WHEN pg_has_role(current_user, 'pg_write_server_files', 'USAGE')"
    "      THEN 'writes the server''s files (pg_write_server_files)' END,"
    " CASE WHEN pg_has_role(current_user, 'pg_read_all_data', 'USAGE')"
    "      THEN 'reads every table (pg_read_all_data)' END,"
    " CASE WHEN EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = 'crier'"
    "                   AND has_schema_privilege(n.oid, 'USAGE'))"
    "      THEN 'uses schema crier (crier''s own tables and secrets)' END)"
    " FROM pg_roles r WHERE r.rolname = current_user";

/* Connects, sets the session up and checks the role (crier_rules_query_check's
 * contract). */
static int rules_query_connect(crier_rules_query *q, char *err, size_t err_len)
{
    char setup[160];
    PGresult *res;
    if (q->conn && PQstatus(q->conn) == CONNECTION_OK)
        return 0;
    if (q->conn)
        PQfinish(q->conn);
    q->conn = PQconnectdb(q->conninfo);
    if (PQstatus(q->conn) != CONNECTION_OK) {
        snprintf(err, err_len,
                 "cannot connect for rule queries: %s(rule queries log in as role crier_rules, which crier "
                 "migrate creates when it may; or give them a connection with --rules-database or "
                 "CRIER_RULES_DATABASE_URL)",
                 PQerrorMessage(q->conn));
        goto fail;
    }
    snprintf(setup, sizeof setup,
             "SET default_transaction_read_only = on; SET statement_timeout = %d;"
             " SET application_name = 'crier rules'",
             q->timeout_ms);
    if (rules_query_exec(q->conn, setup, err, err_len) < 0)
        goto fail;
    if (q->role == CRIER_RULES_QUERY_CRIER_OWN)
        return 0;
    res = PQexec(q->conn, SQL_PRIVILEGES);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        snprintf(err, err_len, "cannot check the rule queries' role: %s", PQresultErrorMessage(res));
        PQclear(res);
        goto fail;
    }
    if (PQgetvalue(res, 0, 1)[0]) {
        snprintf(err, err_len,
                 "rule queries would run as role %s, which %s: rules must read only the data granted to an "
                 "unprivileged role (crier_rules, created by crier migrate; or --rules-database with "
                 "another one), or pass --allow-privileged-rule-queries to run them anyway",
                 PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
        PQclear(res);
        if (q->role == CRIER_RULES_QUERY_UNPRIVILEGED) {
            PQfinish(q->conn);
            q->conn = NULL;
            return CRIER_RULES_QUERY_PRIVILEGED;
        }
        crier_warn("rules", "DANGER: %s (allowed by --allow-privileged-rule-queries)", err);
        return 0;
    }
    PQclear(res);
    return 0;

fail: /* the connection is unusable */
    PQfinish(q->conn);
    q->conn = NULL;
    return CRIER_RULES_QUERY_UNREACHABLE;
}

int crier_rules_query_check(crier_rules_query *q, char *err, size_t err_len)
{
    return rules_query_connect(q, err, err_len);
}

/* The results of one pipelined statement, up to its NULL: the last one kept
 * (or NULL when the connection broke). */
static PGresult *rules_query_take(PGconn *conn)
{
    PGresult *last = NULL, *r;
    while ((r = PQgetResult(conn)) != NULL) {
        PQclear(last);
        last = r;
    }
    return last;
}

/* A failed statement's message, without its trailing newline. */
static void rules_query_error(const PGresult *res, PGconn *conn, char *err, size_t err_len)
{
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    snprintf(err, err_len, "%s",
             st == PGRES_COMMAND_OK       ? "the statement returned no rows (use a SELECT)"
             : st == PGRES_PIPELINE_ABORTED ? "the statement did not run: the transaction around it failed"
             : res                        ? PQresultErrorMessage(res)
                                          : PQerrorMessage(conn));
    size_t len = strlen(err);
    while (len > 0 && (err[len - 1] == '\n' || err[len - 1] == ' '))
        err[--len] = '\0';
}

PGresult *crier_rules_query_run(void *ud, const char *sql, int n, const char *const *values, char *err,
                                size_t err_len)
{
    crier_rules_query *q = ud;
    PGresult *begin, *res, *end, *sync;
    if (rules_query_connect(q, err, err_len) < 0)
        return NULL;
    /* Each statement in its own READ ONLY transaction, rolled back: nothing a
     * query does (a SET, a function with side effects) outlives it. The three
     * statements go in one pipeline: one round trip, not three. */
    if (!PQenterPipelineMode(q->conn) ||
        !PQsendQueryParams(q->conn, "BEGIN READ ONLY", 0, NULL, NULL, NULL, NULL, 0) ||
        !PQsendQueryParams(q->conn, sql, n, NULL, values, NULL, NULL, 0) ||
        !PQsendQueryParams(q->conn, "ROLLBACK", 0, NULL, NULL, NULL, NULL, 0) || !PQpipelineSync(q->conn)) {
        snprintf(err, err_len, "cannot send the rule query: %s", PQerrorMessage(q->conn));
        PQfinish(q->conn); /* reconnected by the next query */
        q->conn = NULL;
        return NULL;
    }
    begin = rules_query_take(q->conn);
    res = rules_query_take(q->conn);
    end = rules_query_take(q->conn);
    sync = PQgetResult(q->conn); /* PGRES_PIPELINE_SYNC */
    bool synced = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        rules_query_error(begin && PQresultStatus(begin) != PGRES_COMMAND_OK ? begin : res, q->conn, err,
                          err_len);
        PQclear(res);
        res = NULL;
    }
    bool rolled_back = end && PQresultStatus(end) == PGRES_COMMAND_OK;
    PQclear(begin);
    PQclear(end);
    if (!synced || !PQexitPipelineMode(q->conn)) {
        crier_warn("rules", "rule query connection: the pipeline did not end cleanly (%s); reconnecting",
                   PQerrorMessage(q->conn));
        PQfinish(q->conn);
        q->conn = NULL;
        return res;
    }
    /* a failed statement left the transaction open and aborted: end it */
    char ignored[256];
    if (!rolled_back && rules_query_exec(q->conn, "ROLLBACK", ignored, sizeof ignored) < 0)
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
