/* rules_query.h — runs the rules' crier.query statements on a blocking,
 * read-only PostgreSQL connection of its own (opened on first use), logged in
 * as an unprivileged role that reads only what the operator granted (never
 * crier's own role: a READ ONLY transaction does not stop COPY … TO PROGRAM,
 * pg_read_file or a SELECT of crier's secrets; a SET ROLE could be undone by
 * the query): every statement in a READ ONLY transaction that is rolled back,
 * with a statement timeout (BEGIN, the query and ROLLBACK pipelined: one round
 * trip). The SQL text comes from the rules (fixed when they load); event data
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

/* Which role a runner's connection may have. */
typedef enum {
    CRIER_RULES_QUERY_UNPRIVILEGED = 0, /* rule queries: a privileged role is refused */
    CRIER_RULES_QUERY_ALLOW_PRIVILEGED, /* rule queries, --allow-privileged-rule-queries: warned */
    CRIER_RULES_QUERY_CRIER_OWN         /* crier's own fixed statements (crier try's preferences):
                                           crier's role, not checked */
} crier_rules_query_role;

/* conninfo: the connection (for rule queries crier_database_rules's: an
 * unprivileged role). timeout_ms: the statement timeout (0: 5000). role: what
 * the connected role may be (see crier_rules_query_check). Returns NULL on
 * allocation failure. */
crier_rules_query *crier_rules_query_new(const char *conninfo, int timeout_ms, crier_rules_query_role role);

/* Connects (if not connected) and checks that the role may not reach past
 * the data granted to it: not a superuser, not a member of
 * pg_execute_server_program, pg_read_server_files, pg_write_server_files or
 * pg_read_all_data, no access to schema crier (crier's own tables and
 * secrets). Returns 0 when the role is unprivileged (or may be privileged:
 * CRIER_RULES_QUERY_ALLOW_PRIVILEGED warns, CRIER_RULES_QUERY_CRIER_OWN does
 * not check), CRIER_RULES_QUERY_PRIVILEGED with err naming the role
 * and what it may do, or CRIER_RULES_QUERY_UNREACHABLE with err from the
 * connection attempt. Queries run only after a check that returned 0. */
enum { CRIER_RULES_QUERY_PRIVILEGED = -1, CRIER_RULES_QUERY_UNREACHABLE = -2 };
int crier_rules_query_check(crier_rules_query *q, char *err, size_t err_len);

/* A crier_rules_query_fn (rules.h): ud is the crier_rules_query. */
PGresult *crier_rules_query_run(void *ud, const char *sql, int n, const char *const *values, char *err,
                                size_t err_len);

/* Closes the connection and frees q. NULL is a no-op. */
void crier_rules_query_free(crier_rules_query *q);

#endif
