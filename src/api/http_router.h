/* http_router.h — what happens to a request once its body has arrived: its
 * headers are checked, its path and method find a route (or a 404/405), the
 * route's credential is authenticated inside the request's transaction, the
 * handler runs and the transaction ends; then the response is queued on the
 * connection with the API's headers (request id, CORS, …), or the live feed
 * the handler opened is played instead.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_handlers, http_auth, http_query, http_cors, http_guard,
 * http_stream, http_request; alloc (base).
 */
#ifndef CRIER_HTTP_ROUTER_H
#define CRIER_HTTP_ROUTER_H

#include "http_request.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

/* The number of routes (route indexes run from 0 to it, exclusive). */
size_t crier_http_route_count(void);

/* The metrics label of route (its path pattern, "/v1/events/{id}"), or NULL
 * when route is not a route's index (-1: none matched). */
const char *crier_http_route_label(int route);

/* Answers r: sets r->route and the response (an error response for a bad
 * header, an unknown path, a method not allowed, an oversized or non-JSON
 * body, JSON nested deeper than CRIER_HTTP_JSON_MAX_DEPTH, a failed
 * authentication, a live feed when every slot is taken). A live feed that
 * gets a slot holds it (r->stream_slot) until the request completes: the
 * server gives it back. allow (allow_len bytes) receives the Allow header's
 * value for a 405 or a preflight, "" otherwise. */
void crier_http_route_dispatch(crier_http_request *r, char *allow, size_t allow_len);

/* Queues r's response on its connection (a 500 when none was set), with
 * Allow when allow is not NULL and Connection: close when close; a live feed
 * opened by a successful handler becomes the response (it owns the stream
 * from then on; a failed request's stream is dropped). Returns
 * libmicrohttpd's verdict (MHD_NO: the connection is closed). */
enum MHD_Result crier_http_route_respond(crier_http_request *r, const char *allow, bool close);

#endif
