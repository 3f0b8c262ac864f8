/* pg_cluster.h — a private PostgreSQL cluster under a data directory (the embedded
 * default, and the throwaway cluster of tests, demo and bench): initdb on first use,
 * start on a unix socket only, stop. Works as root by running the server as an
 * unprivileged user (postgres).
 *
 * Layer: pg (src/pg/), may use base.
 * Calls into: log, proc_stat (base).
 */
#ifndef CRIER_PG_CLUSTER_H
#define CRIER_PG_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    bool fast;          /* fsync=off, synchronous_commit=off, full_page_writes=off: tests/bench only */
    int max_connections; /* 0 = default (100) */
} crier_pg_cluster_options;

/* Starts the cluster in datadir (created and initdb'd if missing or empty; the
 * directory and its parents are created). The server listens on no TCP port,
 * only on a unix socket in datadir (or, if that path is too long for a socket, in
 * a short directory under /tmp derived from it). On success writes a libpq
 * connection string (e.g. "host=/abs/datadir dbname=postgres user=crier") into
 * conninfo and returns 0. If the cluster is already running, returns 0 with its
 * conninfo. On failure returns -1 with a message in err saying what failed and
 * what to do (including the tail of the server log where it helps). */
int crier_pg_cluster_start(const char *datadir, const crier_pg_cluster_options *opts,
                           char *conninfo, size_t conninfo_len, char *err, size_t err_len);

/* Writes the conninfo of the cluster in datadir (running or not) into conninfo.
 * Returns 0, or -1 with err set if datadir holds no cluster. */
int crier_pg_cluster_conninfo(const char *datadir, char *conninfo, size_t conninfo_len,
                              char *err, size_t err_len);

/* Stops the cluster in datadir (fast shutdown, waits for it). Returns 0 when it is
 * stopped (or was not running), -1 with err set otherwise. */
int crier_pg_cluster_stop(const char *datadir, char *err, size_t err_len);

#endif
