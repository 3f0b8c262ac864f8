/* http_handlers.h — the HTTP API's endpoints, one function each, in five
 * files: intake and tokens (http_handlers_events.c), a person's feed
 * (http_handlers_feed.c), a person's preferences and settings
 * (http_handlers_prefs.c), the operator's endpoints (http_handlers_ops.c)
 * and the operator's status page (http_handlers_status.c, its access in
 * http_operator.h).
 * The router (http_router.c) calls them after authenticating the request,
 * inside its transaction where the route says so.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_request, http_query, http_page, http_head, http_auth, http_rules,
 * http_stream, http_stats, http_guard (its metrics) (and http_feed_sql's
 * statements); json_writer, log, time_arg (base).
 */
#ifndef CRIER_HTTP_HANDLERS_H
#define CRIER_HTTP_HANDLERS_H

#include "http_request.h"

/* The endpoints. Each sets the response and returns 0, or sets an error
 * response and returns -1. */
int crier_http_events_create(crier_http_request *r); /* POST /v1/events */
int crier_http_events_get(crier_http_request *r);    /* GET /v1/events/{id} */
int crier_http_tokens_create(crier_http_request *r); /* POST /v1/tokens */
int crier_http_feed_list(crier_http_request *r);     /* GET /v1/feed */
int crier_http_feed_counts(crier_http_request *r);   /* GET /v1/feed/counts */
int crier_http_feed_mark_all(crier_http_request *r); /* POST /v1/feed/read-all, /v1/feed/seen-all */
int crier_http_feed_item(crier_http_request *r);     /* POST /v1/feed/items/{id}/{action} */
int crier_http_feed_stream(crier_http_request *r);   /* GET /v1/feed/stream (Server-Sent Events) */
int crier_http_preferences_get(crier_http_request *r);    /* GET /v1/preferences */
int crier_http_preferences_update(crier_http_request *r); /* PATCH /v1/preferences */
int crier_http_notifications_get(crier_http_request *r); /* GET /v1/notifications/{id} */
int crier_http_dead_list(crier_http_request *r);         /* GET /v1/dead */
int crier_http_dead_replay(crier_http_request *r);       /* POST /v1/dead/replay */
int crier_http_metrics(crier_http_request *r);           /* GET /metrics */
int crier_http_healthz(crier_http_request *r);           /* GET /healthz, GET /readyz */
int crier_http_status_page(crier_http_request *r);       /* GET /, GET /status (HTML) */
int crier_http_status_json(crier_http_request *r);       /* GET /status.json */
int crier_http_status_replay(crier_http_request *r);     /* POST /status/replay */

#endif
