/* rules_query.h — runs the rules' crier.query statements on a blocking,
 * read-only PostgreSQL connection of its own (opened on first use): every
 * statement in a READ ONLY transaction that is rolled back, with a statement
 * timeout. The SQL text comes from the rules (fixed when they load); event data
 * arrives only as parameters.
 *
 * Layer: rules (src/rules/), may use base.
 * Calls into: log (base).
 */
#ifndef CRIER_RULES_QUERY_H
#define CRIER_RULES_QUERY_H

#include <libpq-fe.h>
#include <stddef.h>

typedef struct crier_rules_query crier_rules_query;

/* timeout_ms: the statement timeout (0: 5000). Returns NULL on allocation failure. */
crier_rules_query *crier_rules_query_new(const char *conninfo, int timeout_ms);

/* A crier_rules_query_fn (rules.h): ud is the crier_rules_query. */
PGresult *crier_rules_query_run(void *ud, const char *sql, int n, const char *const *values, char *err,
                                size_t err_len);

/* Closes the connection and frees q. NULL is a no-op. */
void crier_rules_query_free(crier_rules_query *q);

#endif
