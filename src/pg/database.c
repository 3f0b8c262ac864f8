/* database.c — resolve the database: flag, environment, or embedded cluster (see database.h). */
#include "database.h"

#include "log.h"
#include "pg_cluster.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs sql (no parameters, no rows wanted) on conn. Returns 0, or -1 with
 * err set to what (the statement's purpose) and the server's message. */
static int database_exec(PGconn *conn, const char *sql, const char *what, char *err, size_t err_len)
{
    PGresult *res = PQexec(conn, sql);
    int rc = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK ? 0 : -1;
    if (rc < 0)
        snprintf(err, err_len, "cannot %s: %s", what, PQresultErrorMessage(res));
    PQclear(res);
    return rc;
}

/* The embedded cluster's roles: the service role (everyday work, owns the
 * database) and the rules' role (rule queries; reads what is granted). */
static const char SQL_ENSURE_ROLES[] =
    "DO $$ BEGIN"
    " IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" CRIER_SERVICE_ROLE "') THEN"
    "  CREATE ROLE " CRIER_SERVICE_ROLE " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;"
    " END IF;"
    " IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" CRIER_RULES_ROLE "') THEN"
    "  CREATE ROLE " CRIER_RULES_ROLE " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOINHERIT;"
    " END IF;"
    " END $$";

/* Gives schema crier and everything in it to the service role: databases
 * that an earlier crier made as the superuser. Tables take their indexes,
 * owned sequences and row types with them. */
static const char SQL_ADOPT_SCHEMA[] =
    "DO $$ DECLARE o record; BEGIN"
    " IF NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'crier') THEN RETURN; END IF;"
    " EXECUTE 'ALTER SCHEMA crier OWNER TO " CRIER_SERVICE_ROLE "';"
    " FOR o IN SELECT c.oid::regclass AS name, c.relkind FROM pg_class c"
    "   WHERE c.relnamespace = 'crier'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
    " LOOP EXECUTE format('ALTER TABLE %s OWNER TO " CRIER_SERVICE_ROLE "', o.name); END LOOP;"
    " FOR o IN SELECT c.oid::regclass AS name FROM pg_class c"
    "   WHERE c.relnamespace = 'crier'::regnamespace AND c.relkind = 'S'"
    "   AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid"
    "                   AND d.deptype IN ('a', 'i'))"
    " LOOP EXECUTE format('ALTER SEQUENCE %s OWNER TO " CRIER_SERVICE_ROLE "', o.name); END LOOP;"
    " FOR o IN SELECT p.oid::regprocedure AS name, p.prokind FROM pg_proc p"
    "   WHERE p.pronamespace = 'crier'::regnamespace"
    " LOOP EXECUTE format('ALTER %s %s OWNER TO " CRIER_SERVICE_ROLE "',"
    "   CASE o.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE' ELSE 'FUNCTION' END, o.name);"
    " END LOOP;"
    " FOR o IN SELECT t.oid::regtype AS name FROM pg_type t"
    "   WHERE t.typnamespace = 'crier'::regnamespace AND t.typtype IN ('e', 'd', 'c')"
    "   AND (t.typtype <> 'c' OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')"
    " LOOP EXECUTE format('ALTER TYPE %s OWNER TO " CRIER_SERVICE_ROLE "', o.name); END LOOP;"
    " END $$";

/* Makes database name exist in the cluster reachable through admin (the
 * superuser, dbname postgres), owned by the service role; with fresh, drops
 * it first. A database an earlier crier made as the superuser is given to
 * the service role with everything in schema crier. */
static int database_ensure(const char *admin, const char *name, bool fresh, char *err, size_t err_len)
{
    PGconn *conn = PQconnectdb(admin);
    PGresult *res = NULL;
    char sql[512], owned_by_service[8] = "";
    int rc = -1;

    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, err_len, "cannot connect to the embedded cluster: %s", PQerrorMessage(conn));
        goto out;
    }
    if (database_exec(conn, "SET client_min_messages = warning", "set up the session", err, err_len) < 0 ||
        database_exec(conn, SQL_ENSURE_ROLES, "create crier's roles", err, err_len) < 0)
        goto out;
    if (fresh) {
        snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", name);
        if (database_exec(conn, sql, "drop the old database", err, err_len) < 0)
            goto out;
    }
    const char *params[1] = {name};
    res = PQexecParams(conn,
                       "SELECT d.datdba = r.oid FROM pg_database d, pg_roles r"
                       " WHERE d.datname = $1 AND r.rolname = '" CRIER_SERVICE_ROLE "'",
                       1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        snprintf(owned_by_service, sizeof owned_by_service, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    res = NULL;
    if (!strcmp(owned_by_service, "t")) {
        rc = 0;
        goto out;
    }
    if (!owned_by_service[0]) {
        snprintf(sql, sizeof sql, "CREATE DATABASE \"%s\" OWNER " CRIER_SERVICE_ROLE, name);
        res = PQexec(conn, sql);
        /* A concurrent creator may have won the race: that is fine. */
        if (PQresultStatus(res) == PGRES_COMMAND_OK || strstr(PQresultErrorMessage(res), "already exists")) {
            rc = 0;
        } else {
            snprintf(err, err_len, "cannot create database %s: %s", name, PQresultErrorMessage(res));
        }
        goto out;
    }
    /* made by an earlier crier as the superuser: give it to the service role */
    snprintf(sql, sizeof sql, "ALTER DATABASE \"%s\" OWNER TO " CRIER_SERVICE_ROLE, name);
    if (database_exec(conn, sql, "give the database to " CRIER_SERVICE_ROLE, err, err_len) < 0)
        goto out;
    PQfinish(conn);
    snprintf(sql, sizeof sql, "%s dbname='%s'", admin, name);
    conn = PQconnectdb(sql);
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, err_len, "cannot connect to database %s: %s", name, PQerrorMessage(conn));
        goto out;
    }
    if (database_exec(conn, SQL_ADOPT_SCHEMA, "give schema crier to " CRIER_SERVICE_ROLE, err, err_len) < 0)
        goto out;
    crier_info("database", "database %s now belongs to role %s (crier no longer works as the superuser)", name,
               CRIER_SERVICE_ROLE);
    rc = 0;
out:
    PQclear(res);
    PQfinish(conn);
    return rc;
}

int crier_database_conninfo_as(const char *conninfo, const char *user, const char *dbname, char *out,
                               size_t out_len, char *err, size_t err_len)
{
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &perr);
    size_t used = 0;
    int rc = -1;

    if (!opts) {
        snprintf(err, err_len, "the connection string does not parse: %s", perr ? perr : "out of memory");
        PQfreemem(perr);
        return -1;
    }
    out[0] = '\0';
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        const char *v = o->val;
        if (!strcmp(o->keyword, "user"))
            v = user;
        else if (dbname && !strcmp(o->keyword, "dbname"))
            v = dbname;
        if (!v)
            continue;
        /* keyword='value' with ' and \ escaped, as libpq reads it */
        int n = snprintf(out + used, out_len - used, "%s%s='", used ? " " : "", o->keyword);
        if (n < 0 || (size_t)n >= out_len - used)
            goto out;
        used += (size_t)n;
        for (const char *c = v; *c; c++) {
            if (used + 3 >= out_len)
                goto out;
            if (*c == '\'' || *c == '\\')
                out[used++] = '\\';
            out[used++] = *c;
        }
        out[used++] = '\'';
        out[used] = '\0';
    }
    rc = 0;
out:
    if (rc < 0)
        snprintf(err, err_len, "the connection string is too long (at most %zu bytes)", out_len - 1);
    PQconninfoFree(opts);
    return rc;
}

/* True when a server answers at conninfo. */
static bool database_reachable(const char *conninfo)
{
    return PQping(conninfo) == PQPING_OK;
}

int crier_database_open(const char *url, const char *data_dir, bool fast, crier_database *db, char *err,
                        size_t err_len)
{
    char base[1536];
    crier_pg_cluster_options opts = {.fast = fast, .max_connections = 0};

    memset(db, 0, sizeof *db);
    if (!url || !*url)
        url = getenv("CRIER_DATABASE_URL");
    if (url && *url) {
        snprintf(db->conninfo, sizeof db->conninfo, "%s", url);
        return 0;
    }
    if (!data_dir || !*data_dir)
        data_dir = getenv("CRIER_DATA_DIR");
    if (!data_dir || !*data_dir)
        data_dir = CRIER_DEFAULT_DATA_DIR;
    snprintf(db->data_dir, sizeof db->data_dir, "%s", data_dir);
    db->embedded = true;

    if (crier_pg_cluster_conninfo(data_dir, base, sizeof base, err, err_len) == 0 && database_reachable(base)) {
        crier_info("database", "using the running embedded cluster in %s", data_dir);
    } else {
        crier_info("database", "starting the embedded PostgreSQL cluster in %s", data_dir);
        if (crier_pg_cluster_start(data_dir, &opts, base, sizeof base, err, err_len) < 0)
            return -1;
        db->started_cluster = true;
    }
    snprintf(db->admin_conninfo, sizeof db->admin_conninfo, "%s", base);
    if (database_ensure(base, "crier", false, err, err_len) < 0 ||
        crier_database_conninfo_as(base, CRIER_SERVICE_ROLE, "crier", db->conninfo, sizeof db->conninfo, err,
                                   err_len) < 0) {
        crier_database_close(db);
        return -1;
    }
    return 0;
}

int crier_database_create(const crier_database *db, const char *name, bool fresh, char *out, size_t out_len,
                          char *err, size_t err_len)
{
    if (!db->embedded) {
        snprintf(err, err_len, "database %s can only be made in the embedded cluster (no --database)", name);
        return -1;
    }
    if (database_ensure(db->admin_conninfo, name, fresh, err, err_len) < 0)
        return -1;
    return crier_database_conninfo_as(db->admin_conninfo, CRIER_SERVICE_ROLE, name, out, out_len, err, err_len);
}

int crier_database_rules(crier_database *db, const char *rules_url, char *err, size_t err_len)
{
    if (!rules_url || !*rules_url)
        rules_url = getenv("CRIER_RULES_DATABASE_URL");
    if (rules_url && *rules_url) {
        if (strlen(rules_url) >= sizeof db->rules_conninfo) {
            snprintf(err, err_len, "the rules' connection string is too long");
            return -1;
        }
        snprintf(db->rules_conninfo, sizeof db->rules_conninfo, "%s", rules_url);
        return 0;
    }
    return crier_database_conninfo_as(db->conninfo, CRIER_RULES_ROLE, NULL, db->rules_conninfo,
                                      sizeof db->rules_conninfo, err, err_len);
}

void crier_database_close(crier_database *db)
{
    char err[1024];
    if (!db->started_cluster)
        return;
    crier_info("database", "stopping the embedded PostgreSQL cluster in %s", db->data_dir);
    if (crier_pg_cluster_stop(db->data_dir, err, sizeof err) < 0)
        crier_error("database", "%s", err);
    db->started_cluster = false;
}
