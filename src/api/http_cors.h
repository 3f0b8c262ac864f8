/* http_cors.h — which browser origins may call the HTTP API (crier serve
 * --cors-origin: exact origins, or * for any): the Access-Control-* headers of
 * a response to an allowed origin, and the answer to a preflight (OPTIONS).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_request; log (base).
 */
#ifndef CRIER_HTTP_CORS_H
#define CRIER_HTTP_CORS_H

#include "http_request.h"

#include <stddef.h>

struct MHD_Response;

typedef struct crier_http_cors crier_http_cors;

/* Parses the comma-separated list of origins ("scheme://host[:port]", a
 * trailing slash dropped; "*": any origin). NULL or "" allows none. Returns
 * the policy (crier_http_cors_free frees it), or NULL with err set (not an
 * origin, more than 32 of them, out of memory). */
crier_http_cors *crier_http_cors_parse(const char *list, char *err, size_t err_len);

/* The Access-Control-Allow-Origin to answer r with (r->ctx->cors): "*", the
 * request's Origin when it is allowed, or NULL (no Origin, not allowed). */
const char *crier_http_cors_origin(crier_http_request *r);

/* Adds the CORS headers for r to resp when its origin is allowed (for a
 * preflight, the allowed methods and headers too). */
void crier_http_cors_add_headers(crier_http_request *r, struct MHD_Response *resp);

/* Answers an OPTIONS request: 204 (headers added when queued), or 403
 * cors_origin_not_allowed for an Origin that is not allowed. */
void crier_http_cors_preflight(crier_http_request *r);

/* Frees the policy. NULL is a no-op. */
void crier_http_cors_free(crier_http_cors *cors);

#endif
