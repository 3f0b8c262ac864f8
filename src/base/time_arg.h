/* time_arg.h — a point in time as a person gives it on a filter (crier dead
 * --since, GET /v1/dead?since=): a duration ago or a timestamp; and a "not
 * before" time of a scheduled send (POST /v1/events, crier emit
 * --not-before): RFC 3339 with its offset, or (CLI) a duration from now.
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: nothing of crier's.
 */
#ifndef CRIER_TIME_ARG_H
#define CRIER_TIME_ARG_H

#include <stdbool.h>
#include <stddef.h>

/* A duration ago ("90s", "30m", "2h", "7d", or plain seconds) becomes that
 * moment as "YYYY-MM-DD HH:MM:SS+00" in buf (len bytes) and buf is returned;
 * anything else is returned as it is, for PostgreSQL to parse as a timestamp
 * (a bad one is its error). NULL gives NULL. */
const char *crier_time_arg(const char *arg, char *buf, size_t len);

/* True when s is an RFC 3339 date-time with its offset:
 * YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM) ('T' or a space, 'Z' or
 * 'z'), with valid ranges (day of month per month and leap year; second 60
 * refused). */
bool crier_time_rfc3339_valid(const char *s);

/* A "not before" time as the CLI takes it: "+N" followed by s, m, h or d (N
 * seconds, minutes, hours or days from now) becomes that moment as
 * "YYYY-MM-DDTHH:MM:SSZ" in buf (len bytes) and buf is returned; an RFC 3339
 * time is returned as it is; anything else returns NULL. */
const char *crier_time_not_before(const char *arg, char *buf, size_t len);

#endif
