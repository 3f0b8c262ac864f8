/* database.h — which PostgreSQL a command uses: --database, else
 * CRIER_DATABASE_URL, else the embedded default (a private cluster under a data
 * directory, started on demand and stopped again by whoever started it); and
 * which role the rules' queries use (never crier's own).
 *
 * Roles. The embedded default connects as CRIER_SERVICE_ROLE, an ordinary
 * role that owns database "crier" and its schema, never as the cluster's
 * superuser (kept for creating roles and databases). Rule queries
 * (crier.query) log in as CRIER_RULES_ROLE, which crier migrate creates when
 * it may (sql/011_rules_role.sql) and which reads only what the operator
 * grants it; --rules-database / CRIER_RULES_DATABASE_URL name another
 * connection for them.
 *
 * Layer: pg (src/pg/), may use base.
 * Calls into: log (base), pg_cluster.
 */
#ifndef CRIER_DATABASE_H
#define CRIER_DATABASE_H

#include <stdbool.h>
#include <stddef.h>

#define CRIER_DEFAULT_DATA_DIR "./.crier/pg"
#define CRIER_SERVICE_ROLE "crier_service"
#define CRIER_RULES_ROLE "crier_rules" /* also named in sql/011_rules_role.sql */

typedef struct {
    char conninfo[2048];
    char admin_conninfo[2048]; /* embedded only: the cluster's superuser, database postgres */
    char rules_conninfo[2048]; /* filled by crier_database_rules */
    char data_dir[1024];
    bool embedded;        /* the private cluster is in use */
    bool started_cluster; /* this process started it, so it stops it */
} crier_database;

/* Resolves the database. url: the --database flag (NULL if not given).
 * data_dir: the embedded cluster's directory (NULL: CRIER_DATA_DIR or the
 * default). fast: tests/bench settings for a cluster this call creates. With
 * the embedded default the cluster is started if needed and a database named
 * "crier" is created in it. Returns 0, or -1 with err set. */
int crier_database_open(const char *url, const char *data_dir, bool fast, crier_database *db, char *err,
                        size_t err_len);

/* Creates database name (dropping it first when it exists and fresh is set),
 * owned by the service role, in db's embedded cluster, and writes the service
 * role's conninfo for it to out. For tests, benchmarks and the demo. Returns
 * 0, or -1 with err set (also when db is not embedded). */
int crier_database_create(const crier_database *db, const char *name, bool fresh, char *out, size_t out_len,
                          char *err, size_t err_len);

/* Fills db->rules_conninfo, the connection of the rules' queries: rules_url
 * (the --rules-database flag) if given, else CRIER_RULES_DATABASE_URL, else
 * db->conninfo logged in as CRIER_RULES_ROLE. Returns 0, or -1 with err set
 * (a malformed connection string). */
int crier_database_rules(crier_database *db, const char *rules_url, char *err, size_t err_len);

/* Writes conninfo with its user (and dbname, when dbname is not NULL)
 * replaced to out, as a keyword=value string. Returns 0, or -1 with err set
 * (conninfo does not parse, out is too small). */
int crier_database_conninfo_as(const char *conninfo, const char *user, const char *dbname, char *out,
                               size_t out_len, char *err, size_t err_len);

/* Stops the embedded cluster if this process started it. */
void crier_database_close(crier_database *db);

#endif
