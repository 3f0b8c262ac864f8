/* http_router.c — the route table, dispatching a request to its handler in
 * its transaction, and queuing the response (see http_router.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_router.h"
#include "alloc.h"

#include "http_auth.h"
#include "http_cors.h"
#include "http_guard.h"
#include "http_handlers.h"
#include "http_operator.h"
#include "http_query.h"
#include "http_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ROUTE_USER_QUERY: like ROUTE_KEY_OR_USER, and a user token may come in
 * ?access_token= (a browser's EventSource cannot send headers).
 * ROUTE_OPERATOR_*: the status page, checked by http_operator.h before any
 * database work (PAGE: the HTML, READ: its data, ACTION: a change). */
enum {
    ROUTE_PUBLIC,
    ROUTE_KEY,
    ROUTE_KEY_OR_USER,
    ROUTE_USER_QUERY,
    ROUTE_OPERATOR_PAGE,
    ROUTE_OPERATOR_READ,
    ROUTE_OPERATOR_ACTION
};

typedef struct {
    const char *method;
    const char *pattern; /* segments; "*" matches any one */
    const char *name;    /* the metrics label: unique (a path with two methods: the
                            second's label starts with its method) */
    int auth;
    bool txn; /* the dispatcher runs it in a transaction (else it takes a connection itself) */
    int (*fn)(crier_http_request *r);
} route_entry;

static const route_entry routes[] = {
    {"POST", "/v1/events", "/v1/events", ROUTE_KEY, true, crier_http_events_create},
    {"GET", "/v1/events/*", "/v1/events/{id}", ROUTE_KEY, true, crier_http_events_get},
    {"POST", "/v1/tokens", "/v1/tokens", ROUTE_KEY, true, crier_http_tokens_create},
    {"GET", "/v1/feed", "/v1/feed", ROUTE_KEY_OR_USER, true, crier_http_feed_list},
    {"GET", "/v1/feed/counts", "/v1/feed/counts", ROUTE_KEY_OR_USER, true, crier_http_feed_counts},
    {"POST", "/v1/feed/read-all", "/v1/feed/read-all", ROUTE_KEY_OR_USER, true,
     crier_http_feed_mark_all},
    {"POST", "/v1/feed/seen-all", "/v1/feed/seen-all", ROUTE_KEY_OR_USER, true,
     crier_http_feed_mark_all},
    {"POST", "/v1/feed/items/*/*", "/v1/feed/items/{id}/{action}", ROUTE_KEY_OR_USER, true,
     crier_http_feed_item},
    {"GET", "/v1/feed/stream", "/v1/feed/stream", ROUTE_USER_QUERY, true, crier_http_feed_stream},
    {"GET", "/v1/preferences", "/v1/preferences", ROUTE_KEY_OR_USER, true,
     crier_http_preferences_get},
    {"PATCH", "/v1/preferences", "PATCH /v1/preferences", ROUTE_KEY_OR_USER, true,
     crier_http_preferences_update},
    {"GET", "/v1/notifications/*", "/v1/notifications/{id}", ROUTE_KEY, true,
     crier_http_notifications_get},
    {"GET", "/v1/dead", "/v1/dead", ROUTE_KEY, true, crier_http_dead_list},
    {"POST", "/v1/dead/replay", "/v1/dead/replay", ROUTE_KEY, true, crier_http_dead_replay},
    {"GET", "/metrics", "/metrics", ROUTE_PUBLIC, false, crier_http_metrics},
    {"GET", "/healthz", "/healthz", ROUTE_PUBLIC, false, crier_http_healthz},
    {"GET", "/readyz", "/readyz", ROUTE_PUBLIC, false, crier_http_healthz},
    {"GET", "/", "/", ROUTE_OPERATOR_PAGE, false, crier_http_status_page},
    {"GET", "/status", "/status", ROUTE_OPERATOR_PAGE, false, crier_http_status_page},
    {"GET", "/status.json", "/status.json", ROUTE_OPERATOR_READ, true, crier_http_status_json},
    {"POST", "/status/replay", "/status/replay", ROUTE_OPERATOR_ACTION, true,
     crier_http_status_replay},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

size_t crier_http_route_count(void)
{
    return N_ROUTES;
}

const char *crier_http_route_label(int route)
{
    return route >= 0 && (size_t)route < N_ROUTES ? routes[route].name : NULL;
}

/* Splits the path into segments. Returns 0, or -1 for an unusable path. */
static int route_split_path(crier_http_request *r)
{
    char *p;
    if (r->path[0] != '/')
        return -1;
    r->segment_storage = crier_xstrdup(r->path + 1);
    p = r->segment_storage;
    while (p) {
        char *slash = strchr(p, '/');
        if (slash)
            *slash = '\0';
        if (r->n_segments == CRIER_HTTP_MAX_SEGMENTS)
            return -1;
        r->segments[r->n_segments++] = p;
        p = slash ? slash + 1 : NULL;
    }
    return 0;
}

static bool route_pattern_matches(const char *pattern, crier_http_request *r)
{
    int i = 0;
    const char *p = pattern + 1;
    while (*p || i < r->n_segments) {
        size_t len = strcspn(p, "/");
        if (i >= r->n_segments)
            return false;
        if (len == 1 && *p == '*') {
            if (!*r->segments[i])
                return false;
        } else if (strlen(r->segments[i]) != len || strncmp(p, r->segments[i], len)) {
            return false;
        }
        i++;
        p += len;
        if (*p == '/')
            p++;
        else if (!*p)
            break;
    }
    return i == r->n_segments && !*p;
}

/* The route for r, or -1; *allow lists the methods of a path matched with
 * another method (for 405). */
static int route_find(crier_http_request *r, char *allow, size_t allow_len)
{
    allow[0] = '\0';
    if (route_split_path(r) < 0)
        return -1;
    for (size_t i = 0; i < N_ROUTES; i++) {
        if (!route_pattern_matches(routes[i].pattern, r))
            continue;
        if (!strcmp(routes[i].method, r->method))
            return (int)i;
        if (!strstr(allow, routes[i].method)) {
            size_t used = strlen(allow);
            snprintf(allow + used, allow_len - used, "%s%s", used ? ", " : "", routes[i].method);
        }
    }
    if (allow[0]) {
        size_t used = strlen(allow);
        snprintf(allow + used, allow_len - used, ", OPTIONS");
    }
    return -1;
}

typedef struct {
    const char *bad; /* the first header holding control characters */
} route_header_check;

static enum MHD_Result route_header_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                         size_t key_size, const char *value, size_t value_size)
{
    route_header_check *c = cls;
    (void)kind;
    (void)key_size;
    if (value && (strlen(value) != value_size || crier_http_has_controls(value, value_size))) {
        c->bad = key;
        return MHD_NO;
    }
    return MHD_YES;
}

/* Refuses requests whose headers hold control characters (CR, LF, NUL, …). */
static int route_check_headers(crier_http_request *r)
{
    route_header_check c = {NULL};
    MHD_get_connection_values_n(r->conn, MHD_HEADER_KIND, route_header_iter, &c);
    if (c.bad)
        return crier_http_error(r, 400, "invalid_header", "header %.100s holds control characters",
                                c.bad);
    return 0;
}

static bool route_is_json(const char *content_type)
{
    size_t n = strlen("application/json");
    if (!content_type || strncasecmp(content_type, "application/json", n))
        return false;
    return content_type[n] == '\0' || content_type[n] == ';' || content_type[n] == ' ';
}

void crier_http_route_dispatch(crier_http_request *r, char *allow, size_t allow_len)
{
    const route_entry *route;

    if (route_check_headers(r) < 0)
        return;
    if (!strcmp(r->method, "OPTIONS")) {
        crier_http_cors_preflight(r);
        snprintf(allow, allow_len, "GET, POST, PATCH, OPTIONS");
        return;
    }
    if (r->body_too_large) {
        crier_http_error(r, 413, "payload_too_large", "the request body is larger than %zu bytes",
                         r->ctx->max_body);
        return;
    }
    r->route = route_find(r, allow, allow_len);
    if (r->route < 0) {
        if (allow[0])
            crier_http_error(r, 405, "method_not_allowed",
                             "%s is not allowed on %.200s (allowed: %s)", r->method, r->path,
                             allow);
        else
            crier_http_error(r, 404, "not_found", "no such endpoint: %.200s", r->path);
        return;
    }
    route = &routes[r->route];
    if (r->body.len > 0 && !route_is_json(crier_http_header(r, "Content-Type"))) {
        crier_http_error(r, 415, "unsupported_media_type",
                         "send the body as Content-Type: application/json");
        return;
    }
    /* before PostgreSQL or the rules parse it: their parsers recurse */
    if (r->body.len > 0 &&
        crier_http_json_too_deep(r->body.data, r->body.len, CRIER_HTTP_JSON_MAX_DEPTH)) {
        crier_http_error(r, 400, "json_too_deep",
                         "the request body nests arrays and objects deeper than %d levels: "
                         "send at most %d levels of [ and {",
                         CRIER_HTTP_JSON_MAX_DEPTH, CRIER_HTTP_JSON_MAX_DEPTH);
        return;
    }
    if (route->auth >= ROUTE_OPERATOR_PAGE &&
        crier_http_operator_check(r, route->auth == ROUTE_OPERATOR_PAGE   ? CRIER_OPERATOR_PAGE
                                     : route->auth == ROUTE_OPERATOR_READ ? CRIER_OPERATOR_READ
                                                                          : CRIER_OPERATOR_ACTION) < 0)
        goto out;
    if (route->txn) {
        if (crier_http_txn_begin(r) < 0)
            goto out;
        r->query_token = route->auth == ROUTE_USER_QUERY;
        if (route->auth != ROUTE_PUBLIC && route->auth < ROUTE_OPERATOR_PAGE &&
            crier_http_authenticate(r, route->auth != ROUTE_KEY) < 0)
            goto out;
    }
    /* a live feed holds its connection for hours: only so many at once, so
     * that the other connections stay for ordinary requests */
    if (route->fn == crier_http_feed_stream) {
        if (crier_http_guard_stream_acquire(r->ctx->guard) < 0) {
            crier_http_error(r, 503, "busy",
                             "all %d live-feed slots are taken (--http-max-streams); reconnect "
                             "in a while (ordinary requests are still answered)",
                             crier_http_guard_max_streams(r->ctx->guard));
            goto out;
        }
        r->stream_slot = true;
    }
    route->fn(r);
out:
    crier_http_txn_finish(r);
}

enum MHD_Result crier_http_route_respond(crier_http_request *r, const char *allow, bool close)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;
    char id[32];

    if (r->status == 0)
        crier_http_error(r, 500, "internal_error",
                         "the handler produced no response (request id %llu)", r->id);
    if (r->stream && r->status != 200) { /* the request failed after opening it */
        crier_http_stream_abandon(r->stream);
        r->stream = NULL;
    }
    if (r->stream) {
        resp = crier_http_stream_response(r->stream, r->conn);
        r->stream = NULL; /* the response owns it now */
        if (!resp)
            return MHD_NO;
        /* proxies (nginx) must pass events on as they come */
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    } else {
        resp = MHD_create_response_from_buffer(r->response.len,
                                               r->response.data ? r->response.data : (void *)"",
                                               MHD_RESPMEM_MUST_COPY);
    }
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type",
                            r->content_type ? r->content_type : "application/json; charset=utf-8");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    snprintf(id, sizeof id, "%llu", r->id);
    MHD_add_response_header(resp, "X-Request-Id", id);
    if (r->status == 401)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (r->page) {
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'none'; script-src 'unsafe-inline'; style-src "
                                "'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
                                "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
        MHD_add_response_header(resp, "X-Frame-Options", "DENY");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
    if (allow)
        MHD_add_response_header(resp, "Allow", allow);
    if (r->replayed)
        MHD_add_response_header(resp, "Idempotent-Replayed", "true");
    if (close)
        MHD_add_response_header(resp, "Connection", "close");
    crier_http_cors_add_headers(r, resp);
    ret = MHD_queue_response(r->conn, r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}
