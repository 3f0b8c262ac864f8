/* database.c — resolve the database: flag, environment, or embedded cluster (see database.h). */
#include "database.h"

#include "log.h"
#include "pg_cluster.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Creates database "crier" in the cluster reachable through conninfo (dbname
 * postgres) if it does not exist. */
static int database_ensure_crier_db(const char *conninfo, char *err, size_t err_len)
{
    PGconn *conn = PQconnectdb(conninfo);
    PGresult *res;
    int rc = -1;

    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, err_len, "cannot connect to the embedded cluster: %s", PQerrorMessage(conn));
        goto out;
    }
    res = PQexec(conn, "SELECT 1 FROM pg_database WHERE datname = 'crier'");
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        PQclear(res);
        rc = 0;
        goto out;
    }
    PQclear(res);
    res = PQexec(conn, "CREATE DATABASE crier");
    /* A concurrent creator may have won the race: that is fine. */
    if (PQresultStatus(res) == PGRES_COMMAND_OK ||
        strstr(PQresultErrorMessage(res), "already exists") != NULL)
        rc = 0;
    else
        snprintf(err, err_len, "cannot create database crier: %s", PQresultErrorMessage(res));
    PQclear(res);
out:
    PQfinish(conn);
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
    if (database_ensure_crier_db(base, err, err_len) < 0) {
        crier_database_close(db);
        return -1;
    }
    snprintf(db->conninfo, sizeof db->conninfo, "%s dbname=crier", base);
    return 0;
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
