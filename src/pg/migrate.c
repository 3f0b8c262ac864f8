/* migrate.c — applies the embedded schema under an advisory lock: the numbered
 * migrations, then the function files that changed (see migrate.h). */
#include "migrate.h"

#include <libpq-fe.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Advisory lock key that serialises migrators: ASCII "crier-mg". */
#define MIGRATE_LOCK_KEY "7164151245211903847"

/* What the function step did with a function file. */
enum { FUNCTION_UNCHANGED, FUNCTION_NEW, FUNCTION_CHANGED };

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

/* Runs sql (no parameters; several statements allowed, or only comments) and
 * checks the result status. Returns 0, or -1 with the server's message in err. */
static int migrate_exec(PGconn *conn, const char *sql, char *err, size_t err_len)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY) {
        snprintf(err, err_len, "%s", PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    PQclear(res);
    return 0;
}

/* Runs one command with text parameters. Returns 0, or -1 with the server's
 * message in err. */
static int migrate_command(PGconn *conn, const char *sql, int n, const char *const *params,
                           char *err, size_t err_len)
{
    PGresult *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
    int rc = 0;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        snprintf(err, err_len, "%s", PQresultErrorMessage(res));
        rc = -1;
    }
    PQclear(res);
    return rc;
}

/* Reads the checksum recorded for name in table ("schema_migrations" or
 * "schema_functions") into out, "" when there is none. Returns 0, or -1 with
 * err set. */
static int migrate_recorded(PGconn *conn, const char *table, const char *name, char out[65],
                            char *err, size_t err_len)
{
    char sql[128];
    const char *params[1] = {name};
    PGresult *res;

    snprintf(sql, sizeof sql, "SELECT checksum FROM crier.%s WHERE name = $1", table);
    res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "cannot read crier.%s: %s", table, PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    snprintf(out, 65, "%s", PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    return 0;
}

/* Is checksum one that migration name had before it was rewritten in place? */
static bool migrate_is_former(const char *name, const char *checksum)
{
    for (size_t i = 0; i < crier_former_checksums_count; i++)
        if (!strcmp(crier_former_checksums[i].name, name) &&
            !strcmp(crier_former_checksums[i].checksum, checksum))
            return true;
    return false;
}

/* Step 1: applies each pending numbered migration in its own transaction and
 * re-records the checksum of each one applied in a former text. Returns the
 * number of actions, or -1 with err set. */
static int migrate_numbered(PGconn *conn, FILE *out, char *err, size_t err_len)
{
    int actions = 0;
    char msg[1024];

    for (size_t i = 0; i < crier_migrations_count; i++) {
        const crier_migration *m = &crier_migrations[i];
        char sum[65], recorded[65];
        const char *params[3] = {m->name, sum, recorded};

        migrate_checksum(m->sql, sum);
        if (migrate_recorded(conn, "schema_migrations", m->name, recorded, err, err_len) < 0)
            return -1;
        if (!strcmp(recorded, sum))
            continue;
        if (recorded[0] && migrate_is_former(m->name, recorded)) {
            /* The former text made the same schema as this one and the function files. */
            if (migrate_command(conn,
                                "UPDATE crier.schema_migrations SET checksum = $2"
                                " WHERE name = $1 AND checksum = $3",
                                3, params, msg, sizeof msg) < 0) {
                snprintf(err, err_len, "cannot re-record migration %s: %s", m->name, msg);
                return -1;
            }
            actions++;
            if (out)
                fprintf(
                    out,
                    "re-recorded %s: rewritten since it was applied (sql/rewritten-checksums.txt), "
                    "checksum %.12s is now %.12s\n",
                    m->name, recorded, sum);
            continue;
        }
        if (recorded[0]) {
            snprintf(
                err, err_len,
                "migration %s was applied with different content (checksum %.12s, file %.12s): "
                "migrations must never be edited once applied; add a new one instead",
                m->name, recorded, sum);
            return -1;
        }

        if (migrate_exec(conn, "BEGIN", msg, sizeof msg) < 0 ||
            migrate_exec(conn, m->sql, msg, sizeof msg) < 0) {
            snprintf(err, err_len, "migration %s failed: %s", m->name, msg);
            migrate_exec(conn, "ROLLBACK", msg, sizeof msg);
            return -1;
        }
        if (migrate_command(conn,
                            "INSERT INTO crier.schema_migrations (name, checksum) VALUES ($1, $2)",
                            2, params, msg, sizeof msg) < 0) {
            snprintf(err, err_len, "cannot record migration %s: %s", m->name, msg);
            migrate_exec(conn, "ROLLBACK", msg, sizeof msg);
            return -1;
        }
        if (migrate_exec(conn, "COMMIT", msg, sizeof msg) < 0) {
            snprintf(err, err_len, "migration %s failed at commit: %s", m->name, msg);
            return -1;
        }
        actions++;
        if (out)
            fprintf(out, "applied %s\n", m->name);
    }
    return actions;
}

/* Step 2: in one transaction with check_function_bodies off (so that function
 * files may refer to each other in any order), applies each function file
 * whose checksum is not the one recorded, and records it. Says what it applied
 * once committed. Returns the number of files applied, or -1 with err set
 * (and nothing of this step applied). */
static int migrate_functions(PGconn *conn, FILE *out, char *err, size_t err_len)
{
    unsigned char *done = calloc(crier_functions_count + 1, 1);
    int applied = 0;
    bool in_txn = false;
    char msg[1024];

    if (!done) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    if (migrate_exec(conn, "BEGIN; SET LOCAL check_function_bodies = off", msg, sizeof msg) < 0) {
        snprintf(err, err_len, "cannot begin applying the function files: %s", msg);
        goto fail;
    }
    in_txn = true;
    for (size_t i = 0; i < crier_functions_count; i++) {
        const crier_migration *f = &crier_functions[i];
        char sum[65], recorded[65];
        const char *params[2] = {f->name, sum};

        migrate_checksum(f->sql, sum);
        if (migrate_recorded(conn, "schema_functions", f->name, recorded, err, err_len) < 0)
            goto fail;
        if (!strcmp(recorded, sum))
            continue;
        if (migrate_exec(conn, f->sql, msg, sizeof msg) < 0) {
            snprintf(err, err_len, "function file %s failed (no function file was applied): %s",
                     f->name, msg);
            goto fail;
        }
        if (migrate_command(conn,
                            "INSERT INTO crier.schema_functions (name, checksum) VALUES ($1, $2)"
                            " ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, "
                            "applied_at = now()",
                            2, params, msg, sizeof msg) < 0) {
            snprintf(err, err_len, "cannot record function file %s: %s", f->name, msg);
            goto fail;
        }
        done[i] = recorded[0] ? FUNCTION_CHANGED : FUNCTION_NEW;
        applied++;
    }
    in_txn = false; /* a failed COMMIT ends the transaction too */
    if (migrate_exec(conn, "COMMIT", msg, sizeof msg) < 0) {
        snprintf(err, err_len, "the function files failed at commit: %s", msg);
        goto fail;
    }
    for (size_t i = 0; out && i < crier_functions_count; i++)
        if (done[i] != FUNCTION_UNCHANGED)
            fprintf(out, "%s function %s\n",
                    done[i] == FUNCTION_NEW ? "applied" : "reapplied (changed)",
                    crier_functions[i].name);
    free(done);
    return applied;

fail:
    if (in_txn)
        migrate_exec(conn, "ROLLBACK", msg, sizeof msg);
    free(done);
    return -1;
}

int crier_migrate_run(const char *conninfo, FILE *out, char *err, size_t err_len)
{
    PGconn *conn = PQconnectdb(conninfo);
    int migrations, functions;
    char msg[1024];

    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, err_len,
                 "cannot connect to the database: %s(check CRIER_DATABASE_URL or --database)",
                 PQerrorMessage(conn));
        goto fail;
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
                     " applied_at timestamptz NOT NULL DEFAULT now());"
                     "CREATE TABLE IF NOT EXISTS crier.schema_functions ("
                     " name text PRIMARY KEY, checksum text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())",
                     msg, sizeof msg) < 0) {
        snprintf(err, err_len,
                 "cannot create crier.schema_migrations and crier.schema_functions: %s", msg);
        goto fail;
    }
    migrations = migrate_numbered(conn, out, err, err_len);
    if (migrations < 0)
        goto fail;
    functions = migrate_functions(conn, out, err, err_len);
    if (functions < 0)
        goto fail;
    if (out && migrations + functions == 0)
        fprintf(
            out,
            "schema crier is up to date (%zu migrations and %zu function files applied earlier)\n",
            crier_migrations_count, crier_functions_count);
    PQfinish(conn); /* ends the session, which releases the advisory lock */
    return migrations + functions;

fail:
    PQfinish(conn);
    return -1;
}

/* Whether name is among the n rows of res's first column. */
static bool migrate_in_result(const PGresult *res, const char *name)
{
    for (int i = 0; i < PQntuples(res); i++)
        if (!strcmp(PQgetvalue(res, i, 0), name))
            return true;
    return false;
}

int crier_migrate_check(PGconn *conn, char *err, size_t err_len)
{
    PGresult *res = PQexec(conn, "SELECT to_regclass('crier.schema_migrations') IS NOT NULL"
                                 " AND to_regclass('crier.schema_functions') IS NOT NULL");
    size_t missing = 0, missing_functions = 0;
    const char *first = NULL;
    int rc = -1;

    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "cannot read the database's schema: %s", PQresultErrorMessage(res));
        goto out;
    }
    if (PQgetvalue(res, 0, 0)[0] != 't') {
        snprintf(err, err_len, "the database has no crier schema yet: run crier migrate");
        goto out;
    }
    PQclear(res);
    res = PQexec(conn, "SELECT name FROM crier.schema_migrations");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "cannot read crier.schema_migrations: %s", PQresultErrorMessage(res));
        goto out;
    }
    for (size_t i = 0; i < crier_migrations_count; i++) {
        if (!migrate_in_result(res, crier_migrations[i].name)) {
            missing++;
            first = first ? first : crier_migrations[i].name;
        }
    }
    PQclear(res);
    res = PQexec(conn, "SELECT name FROM crier.schema_functions");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "cannot read crier.schema_functions: %s", PQresultErrorMessage(res));
        goto out;
    }
    for (size_t i = 0; i < crier_functions_count; i++)
        missing_functions += !migrate_in_result(res, crier_functions[i].name);
    if (missing)
        snprintf(err, err_len,
                 "the database's crier schema is behind this crier (%zu migration%s pending, from %s): "
                 "run crier migrate",
                 missing, missing == 1 ? "" : "s", first);
    else if (missing_functions)
        snprintf(err, err_len,
                 "the database's crier schema is behind this crier (%zu function file%s never applied): "
                 "run crier migrate",
                 missing_functions, missing_functions == 1 ? "" : "s");
    else
        rc = 0;
out:
    PQclear(res);
    return rc;
}

void crier_migrate_schema_checksum(char out[65])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    static const char hex[] = "0123456789abcdef";
    const crier_migration *lists[2] = {crier_migrations, crier_functions};
    const size_t counts[2] = {crier_migrations_count, crier_functions_count};

    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        snprintf(out, 65, "unknown");
        EVP_MD_CTX_free(ctx);
        return;
    }
    for (int l = 0; l < 2; l++) {
        for (size_t i = 0; i < counts[l]; i++) {
            /* each file as its name and content, each NUL-terminated */
            EVP_DigestUpdate(ctx, lists[l][i].name, strlen(lists[l][i].name) + 1);
            EVP_DigestUpdate(ctx, lists[l][i].sql, strlen(lists[l][i].sql) + 1);
        }
    }
    EVP_DigestFinal_ex(ctx, md, &n);
    EVP_MD_CTX_free(ctx);
    for (unsigned int i = 0; i < n && i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}
