/* database.h — which PostgreSQL a command uses: --database, else
 * CRIER_DATABASE_URL, else the embedded default (a private cluster under a data
 * directory, started on demand and stopped again by whoever started it).
 *
 * Layer: pg (src/pg/), may use base.
 * Calls into: log (base), pg_cluster.
 */
#ifndef CRIER_DATABASE_H
#define CRIER_DATABASE_H

#include <stdbool.h>
#include <stddef.h>

#define CRIER_DEFAULT_DATA_DIR "./.crier/pg"

typedef struct {
    char conninfo[2048];
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

/* Stops the embedded cluster if this process started it. */
void crier_database_close(crier_database *db);

#endif
