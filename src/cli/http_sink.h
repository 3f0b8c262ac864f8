/* http_sink.h — a local HTTP receiver on loopback (libmicrohttpd, its own
 * thread) that answers every POST with 204 and records each request's
 * webhook-id: the demo's receiver and the benchmarks' sink.
 *
 * Layer: cli (src/cli/), may use engine, api and every layer below them.
 * Calls into: alloc (base).
 */
#ifndef CRIER_HTTP_SINK_H
#define CRIER_HTTP_SINK_H

#include <stddef.h>

typedef struct crier_http_sink crier_http_sink;

/* Starts the sink on 127.0.0.1 with an ephemeral port. NULL on failure (err set). */
crier_http_sink *crier_http_sink_start(char *err, size_t err_len);

/* The port it listens on. */
unsigned crier_http_sink_port(const crier_http_sink *s);

/* Copies the webhook-ids received so far (in arrival order) into a new array
 * of strdup'd strings; *n receives the count. The caller frees each string and
 * the array. */
char **crier_http_sink_ids(crier_http_sink *s, size_t *n);

/* Stops the sink and frees it. NULL is a no-op. */
void crier_http_sink_stop(crier_http_sink *s);

#endif
