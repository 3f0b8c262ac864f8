/* migrate.c — applies the embedded SQL migrations under an advisory lock (see migrate.h). */
#include "migrate.h"

#include "log.h"

#include <libpq-fe.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

/* Advisory lock key that serialises migrators: ASCII "crier-mg". */
#define MIGRATE_LOCK_KEY "7164151245211903847"

static void migrate_checksum(const char *sql, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    static const char hex[] = "0123456789abcdef";

    EVP_Digest(sql, strlen(sql), md, &n, EVP_sha256(), NULL);
    for (unsigned int i = 0; i < n && i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}

/* Runs sql (no parameters) and checks the result status. */
static int migrate_exec(PGconn *conn, const char *sql, char *err, size_t err_len)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "%s", PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    PQclear(res);
    return 0;
}

int crier_migrate_run(const char *conninfo, FILE *out, char *err, size_t err_len)
{
    PGconn *conn = PQconnectdb(conninfo);
    PGresult *res = NULL;
    int applied = 0;
    char msg[1024];

    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, err_len, "cannot connect to the database: %s(check CRIER_DATABASE_URL or --database)",
                 PQerrorMessage(conn));
        PQfinish(conn);
        return -1;
    }
    if (migrate_exec(conn, "SET client_min_messages = warning", msg, sizeof msg) < 0 ||
        migrate_exec(conn, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", msg, sizeof msg) < 0) {
        snprintf(err, err_len, "cannot take the migration lock: %s", msg);
        goto fail;
    }
    if (migrate_exec(conn,
                     "CREATE SCHEMA IF NOT EXISTS crier;"
                     "CREATE TABLE IF NOT EXISTS crier.schema_migrations ("
                     " name text PRIMARY KEY, checksum text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())",
                     msg, sizeof msg) < 0) {
        snprintf(err, err_len, "cannot create crier.schema_migrations: %s", msg);
        goto fail;
    }

    for (size_t i = 0; i < crier_migrations_count; i++) {
        const crier_migration *m = &crier_migrations[i];
        const char *params[2];
        char sum[65];

        migrate_checksum(m->sql, sum);
        params[0] = m->name;
        res = PQexecParams(conn, "SELECT checksum FROM crier.schema_migrations WHERE name = $1", 1,
                           NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            snprintf(err, err_len, "cannot read crier.schema_migrations: %s", PQresultErrorMessage(res));
            goto fail;
        }
        if (PQntuples(res) == 1) {
            if (strcmp(PQgetvalue(res, 0, 0), sum) != 0) {
                snprintf(err, err_len,
                         "migration %s was applied with different content (checksum %.12s, file %.12s): "
                         "migrations must never be edited once applied; add a new one instead",
                         m->name, PQgetvalue(res, 0, 0), sum);
                goto fail;
            }
            PQclear(res);
            res = NULL;
            continue;
        }
        PQclear(res);
        res = NULL;

        if (migrate_exec(conn, "BEGIN", msg, sizeof msg) < 0 ||
            migrate_exec(conn, m->sql, msg, sizeof msg) < 0) {
            snprintf(err, err_len, "migration %s failed: %s", m->name, msg);
            migrate_exec(conn, "ROLLBACK", msg, sizeof msg);
            goto fail;
        }
        params[1] = sum;
        res = PQexecParams(conn, "INSERT INTO crier.schema_migrations (name, checksum) VALUES ($1, $2)", 2,
                           NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            snprintf(err, err_len, "cannot record migration %s: %s", m->name, PQresultErrorMessage(res));
            migrate_exec(conn, "ROLLBACK", msg, sizeof msg);
            goto fail;
        }
        PQclear(res);
        res = NULL;
        if (migrate_exec(conn, "COMMIT", msg, sizeof msg) < 0) {
            snprintf(err, err_len, "migration %s failed at commit: %s", m->name, msg);
            goto fail;
        }
        applied++;
        if (out)
            fprintf(out, "applied %s\n", m->name);
    }
    if (out && applied == 0)
        fprintf(out, "schema crier is up to date (%zu migrations applied earlier)\n", crier_migrations_count);
    PQfinish(conn); /* ends the session, which releases the advisory lock */
    return applied;

fail:
    PQclear(res);
    PQfinish(conn);
    return -1;
}
