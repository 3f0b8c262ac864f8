/* http_cors.c — the origins browsers may call the HTTP API from (see
 * http_cors.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_cors.h"

#include "log.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CORS_MAX_ORIGINS 32

struct crier_http_cors {
    char *storage; /* the list, cut into the origins */
    const char *origins[CORS_MAX_ORIGINS];
    size_t n;
    bool any;
};

crier_http_cors *crier_http_cors_parse(const char *list, char *err, size_t err_len)
{
    crier_http_cors *cors = calloc(1, sizeof *cors);
    char *save = NULL;
    if (!cors || !(cors->storage = strdup(list ? list : ""))) {
        crier_set_error(err, err_len, "out of memory");
        goto fail;
    }
    for (char *tok = strtok_r(cors->storage, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (!strcmp(tok, "*")) {
            cors->any = true;
            continue;
        }
        if (strncmp(tok, "http://", 7) && strncmp(tok, "https://", 8)) {
            crier_set_error(err, err_len,
                            "--cors-origin: '%s' is not an origin (scheme://host[:port]) or *",
                            tok);
            goto fail;
        }
        if (cors->n == CORS_MAX_ORIGINS) {
            crier_set_error(err, err_len, "--cors-origin: at most %d origins", CORS_MAX_ORIGINS);
            goto fail;
        }
        size_t len = strlen(tok);
        if (len > 8 && tok[len - 1] == '/')
            tok[len - 1] = '\0'; /* an origin has no path */
        cors->origins[cors->n++] = tok;
    }
    return cors;

fail:
    crier_http_cors_free(cors);
    return NULL;
}

const char *crier_http_cors_origin(crier_http_request *r)
{
    const crier_http_cors *cors = r->ctx->cors;
    const char *origin;
    if (!cors->n && !cors->any)
        return NULL;
    origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (!origin)
        return NULL;
    if (cors->any)
        return "*";
    for (size_t i = 0; i < cors->n; i++)
        if (!strcmp(cors->origins[i], origin))
            return origin;
    return NULL;
}

void crier_http_cors_add_headers(crier_http_request *r, struct MHD_Response *resp)
{
    const char *origin = crier_http_cors_origin(r);
    if (!origin)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    if (strcmp(origin, "*"))
        MHD_add_response_header(resp, "Vary", "Origin");
    MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                            "Idempotent-Replayed, X-Request-Id");
    if (!strcmp(r->method, "OPTIONS")) { /* a preflight */
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, PATCH, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type, Idempotency-Key");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
}

void crier_http_cors_preflight(crier_http_request *r)
{
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (origin && !crier_http_cors_origin(r)) {
        crier_http_error(r, 403, "cors_origin_not_allowed",
                         "origin %.200s may not call this API from a browser", origin);
        return;
    }
    r->status = 204;
    r->response.len = 0;
}

void crier_http_cors_free(crier_http_cors *cors)
{
    if (!cors)
        return;
    free(cors->storage);
    free(cors);
}
