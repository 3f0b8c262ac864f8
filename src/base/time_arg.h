/* time_arg.h — a point in time as a person gives it on a filter (crier dead
 * --since, GET /v1/dead?since=): a duration ago or a timestamp.
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: nothing of crier's.
 */
#ifndef CRIER_TIME_ARG_H
#define CRIER_TIME_ARG_H

#include <stddef.h>

/* A duration ago ("90s", "30m", "2h", "7d", or plain seconds) becomes that
 * moment as "YYYY-MM-DD HH:MM:SS+00" in buf (len bytes) and buf is returned;
 * anything else is returned as it is, for PostgreSQL to parse as a timestamp
 * (a bad one is its error). NULL gives NULL. */
const char *crier_time_arg(const char *arg, char *buf, size_t len);

#endif
