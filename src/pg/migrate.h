/* migrate.h — versioned schema migrations (sql/NNN_*.sql, embedded at build time),
 * applied in order under an advisory lock so that concurrent runs are safe.
 *
 * Layer: pg (src/pg/), may use base.
 * Calls into: log (base).
 */
#ifndef CRIER_MIGRATE_H
#define CRIER_MIGRATE_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *name; /* file name, e.g. "001_init.sql" */
    const char *sql;
} crier_migration;

extern const crier_migration crier_migrations[];
extern const size_t crier_migrations_count;

/* Connects to conninfo and applies every pending migration, each in its own
 * transaction, while holding a session advisory lock. A migration that was
 * applied with different content is reported as an error. Writes one line per
 * action to out (if not NULL): what was applied, or that nothing was pending.
 * Returns the number of migrations applied (>= 0), or -1 with err set. */
int crier_migrate_run(const char *conninfo, FILE *out, char *err, size_t err_len);

#endif
