/* http_stats.h — the HTTP API's request counters: requests answered and the
 * time spent answering them, by route and status, written for /metrics in the
 * Prometheus text format (crier_http_requests_total,
 * crier_http_request_duration_seconds).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: json_writer (base).
 */
#ifndef CRIER_HTTP_STATS_H
#define CRIER_HTTP_STATS_H

#include "json_writer.h"

#include <stddef.h>

typedef struct crier_http_stats crier_http_stats;

/* Counters for n_routes routes plus the requests no route matched. Returns
 * them (crier_http_stats_free frees them), or NULL when out of memory. */
crier_http_stats *crier_http_stats_new(size_t n_routes);

/* Counts one answered request of route (its index, 0..n_routes-1, labelled
 * label, a string that outlives the counters; route < 0: no route matched,
 * labelled "unmatched") with its status and the seconds it took. Safe from
 * any thread. The first 24 statuses of a route are counted apart, later ones
 * only in the duration. */
void crier_http_stats_count(crier_http_stats *stats, int route, const char *label, unsigned status,
                            double seconds);

/* Appends the counters in the Prometheus text format (routes in index order,
 * unmatched last; routes never requested are left out). */
void crier_http_stats_write(crier_http_stats *stats, crier_json_buf *b);

/* Frees the counters. NULL is a no-op. */
void crier_http_stats_free(crier_http_stats *stats);

#endif
