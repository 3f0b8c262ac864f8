/* http_guard.h — keeps one client from locking the others out of the HTTP
 * API: what libmicrohttpd's own limits lack.
 *
 * libmicrohttpd caps connections in total (--http-max-connections) and per
 * client address (--http-max-per-address, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
 * both set by http_server.c); its timeout restarts at every byte received, so
 * a client that sends a header a byte at a time (slowloris) keeps its slot
 * for ever. The guard adds:
 * - a read deadline: a request's headers and body must have arrived within
 *   the read timeout (--http-read-timeout) of the connection becoming ready
 *   for it — accepted, or its previous answer sent (an idle kept-alive
 *   connection is closed after as long). The guard's thread shuts down a
 *   connection past its deadline, and libmicrohttpd closes it. While a
 *   request is being answered, a live feed included, no deadline runs;
 * - slots for live feeds (--http-max-streams): streams stay open for hours,
 *   so only so many may be open at once, and the other connections stay for
 *   ordinary requests;
 * - a count of the connections libmicrohttpd refused over its limits, with
 *   a warning at most every 10 s.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: clock, json_writer, log (base).
 */
#ifndef CRIER_HTTP_GUARD_H
#define CRIER_HTTP_GUARD_H

#include "json_writer.h"

#include <microhttpd.h>
#include <stddef.h>

typedef struct crier_http_guard crier_http_guard;

/* Starts the guard's thread: read_timeout in seconds (> 0), max_streams the
 * live feeds open at once (> 0). Returns the guard (crier_http_guard_stop
 * frees it), or NULL with err set when no thread can start. */
crier_http_guard *crier_http_guard_start(double read_timeout, int max_streams, char *err,
                                         size_t err_len);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls: the guard):
 * starts a connection's read deadline when it opens, forgets it when it
 * closes. A connection the guard cannot track (out of memory) has no
 * deadline. */
void crier_http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                             enum MHD_ConnectionNotificationCode code);

/* The request on conn has arrived whole and is being answered: no deadline
 * until it completes. */
void crier_http_guard_answering(struct MHD_Connection *conn);

/* The request on conn has completed: the connection waits for the next one,
 * which must arrive within the read timeout. */
void crier_http_guard_waiting(struct MHD_Connection *conn);

/* Takes a live feed's slot. Returns 0, or -1 when all are taken (counted;
 * the caller answers 503). A slot taken is given back with
 * crier_http_guard_stream_release once its request completes. */
int crier_http_guard_stream_acquire(crier_http_guard *guard);
void crier_http_guard_stream_release(crier_http_guard *guard);

/* Counts a connection libmicrohttpd refused over a connection limit, and
 * warns (at most every 10 s, with the count since) naming the flags. */
void crier_http_guard_refused(crier_http_guard *guard);

/* The number of live feeds the guard allows (its slots). */
int crier_http_guard_max_streams(const crier_http_guard *guard);

/* Appends the guard's Prometheus metrics: crier_http_read_timeouts_total,
 * crier_http_connections_refused_total, crier_http_streams_refused_total,
 * crier_http_stream_slots, crier_http_stream_slots_used. */
void crier_http_guard_metrics(crier_http_guard *guard, crier_json_buf *b);

/* Stops the thread and frees guard; after the HTTP daemon has stopped (it
 * has closed every connection). NULL is a no-op. */
void crier_http_guard_stop(crier_http_guard *guard);

#endif
