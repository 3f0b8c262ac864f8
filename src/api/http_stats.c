/* http_stats.c — the HTTP API's request counters by route and status (see
 * http_stats.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_stats.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#define STATS_MAX_STATUS_CODES 24

typedef struct {
    const char *label; /* NULL until the route is first counted */
    unsigned status[STATS_MAX_STATUS_CODES];
    unsigned long long count[STATS_MAX_STATUS_CODES];
    size_t n;
    double seconds;
    unsigned long long requests;
} stats_route;

struct crier_http_stats {
    pthread_mutex_t lock;
    size_t n_routes;
    stats_route routes[]; /* n_routes + 1: the last one counts unmatched requests */
};

crier_http_stats *crier_http_stats_new(size_t n_routes)
{
    crier_http_stats *stats = calloc(1, sizeof *stats + (n_routes + 1) * sizeof stats->routes[0]);
    if (!stats)
        return NULL;
    pthread_mutex_init(&stats->lock, NULL);
    stats->n_routes = n_routes;
    return stats;
}

void crier_http_stats_count(crier_http_stats *stats, int route, const char *label, unsigned status,
                            double seconds)
{
    bool matched = route >= 0 && (size_t)route < stats->n_routes;
    stats_route *s = &stats->routes[matched ? (size_t)route : stats->n_routes];
    pthread_mutex_lock(&stats->lock);
    s->label = matched ? label : "unmatched";
    s->requests++;
    s->seconds += seconds;
    size_t i;
    for (i = 0; i < s->n && s->status[i] != status; i++)
        ;
    if (i == s->n && s->n < STATS_MAX_STATUS_CODES) {
        s->status[i] = status;
        s->count[i] = 0;
        s->n++;
    }
    if (i < s->n)
        s->count[i]++;
    pthread_mutex_unlock(&stats->lock);
}

void crier_http_stats_write(crier_http_stats *stats, crier_json_buf *b)
{
    pthread_mutex_lock(&stats->lock);
    crier_json_buf_puts(
        b,
        "# HELP crier_http_requests_total Requests answered by the HTTP API, by route and status.\n"
        "# TYPE crier_http_requests_total counter\n");
    for (size_t r = 0; r <= stats->n_routes; r++) {
        const stats_route *s = &stats->routes[r];
        for (size_t i = 0; i < s->n; i++) {
            crier_json_buf_puts(b, "crier_http_requests_total{route=");
            crier_json_buf_prometheus_label(b, s->label);
            crier_json_buf_printf(b, ",status=\"%u\"} %llu\n", s->status[i], s->count[i]);
        }
    }
    crier_json_buf_puts(
        b, "# HELP crier_http_request_duration_seconds Time spent answering requests, by route.\n"
           "# TYPE crier_http_request_duration_seconds summary\n");
    for (size_t r = 0; r <= stats->n_routes; r++) {
        const stats_route *s = &stats->routes[r];
        if (!s->requests)
            continue;
        crier_json_buf_puts(b, "crier_http_request_duration_seconds_sum{route=");
        crier_json_buf_prometheus_label(b, s->label);
        crier_json_buf_printf(b, "} %.6f\n", s->seconds);
        crier_json_buf_puts(b, "crier_http_request_duration_seconds_count{route=");
        crier_json_buf_prometheus_label(b, s->label);
        crier_json_buf_printf(b, "} %llu\n", s->requests);
    }
    pthread_mutex_unlock(&stats->lock);
}

void crier_http_stats_free(crier_http_stats *stats)
{
    if (!stats)
        return;
    pthread_mutex_destroy(&stats->lock);
    free(stats);
}
