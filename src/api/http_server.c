/* http_server.c — the HTTP API server: libmicrohttpd threads, routing, the
 * per-request transaction on a pooled PostgreSQL connection, request and
 * response helpers, the JSON writer, CORS and the API's own metrics (see
 * http_server.h). */
#include "http_server.h"

#include "clock.h"
#include "http_auth.h"
#include "http_pool.h"
#include "http_rules.h"
#include "http_stats.h"
#include "http_stream.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define API_DEFAULT_THREADS 4
#define API_DEFAULT_MAX_BODY (1024 * 1024)
#define API_MAX_CORS_ORIGINS 32
#define API_DB_WAIT 10.0 /* seconds a request waits for a free database connection */
#define API_DEFAULT_CONNECTIONS 1024

/* ------------------------------------------------------------------------
 * The server
 */

/* ROUTE_USER_QUERY: like ROUTE_KEY_OR_USER, and a user token may come in
 * ?access_token= (a browser's EventSource cannot send headers) */
enum { ROUTE_PUBLIC, ROUTE_KEY, ROUTE_KEY_OR_USER, ROUTE_USER_QUERY };

typedef struct {
    const char *method;
    const char *pattern; /* segments; "*" matches any one */
    const char *name;    /* the metrics label */
    int auth;
    bool txn; /* the dispatcher runs it in a transaction (else it takes a connection itself) */
    int (*fn)(crier_http_request *r);
} api_route;

static const api_route api_routes[] = {
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
    {"GET", "/v1/notifications/*", "/v1/notifications/{id}", ROUTE_KEY, true,
     crier_http_notifications_get},
    {"GET", "/v1/dead", "/v1/dead", ROUTE_KEY, true, crier_http_dead_list},
    {"POST", "/v1/dead/replay", "/v1/dead/replay", ROUTE_KEY, true, crier_http_dead_replay},
    {"GET", "/metrics", "/metrics", ROUTE_PUBLIC, false, crier_http_metrics},
    {"GET", "/healthz", "/healthz", ROUTE_PUBLIC, false, crier_http_healthz},
};
#define API_N_ROUTES (sizeof api_routes / sizeof api_routes[0])

struct crier_http_api {
    struct MHD_Daemon *daemon;
    unsigned port;
    size_t max_body;
    double max_lag;
    atomic_ullong next_id;
    atomic_int inflight; /* requests between their first byte and their completion */

    char *cors_storage;
    const char *cors[API_MAX_CORS_ORIGINS];
    size_t n_cors;
    bool cors_any;

    crier_http_pool *pool;       /* database connections: one per request thread */
    crier_http_rules *rules;     /* the rules generation used to validate intake */
    crier_http_streams *streams; /* live feeds (Server-Sent Events) */
    crier_http_stats *stats;     /* request counters by route */
};

/* ------------------------------------------------------------------------
 * Database connections
 */

crier_http_streams *crier_http_api_streams(crier_http_api *api)
{
    return api->streams;
}

int crier_http_db_acquire(crier_http_request *r, double wait_s, char *err, size_t err_len)
{
    if (r->pg)
        return 0;
    if (crier_http_pool_take(r->api->pool, wait_s, &r->pg_slot, &r->pg, err, err_len) < 0) {
        r->pg = NULL;
        return -1;
    }
    return 0;
}

void crier_http_db_release(crier_http_request *r)
{
    if (!r->pg)
        return;
    crier_http_pool_give(r->api->pool, r->pg_slot);
    r->pg = NULL;
    r->in_txn = false;
}

/* Opens the request's transaction; a connection found broken (the server
 * restarted, the backend was terminated) is replaced once. */
static int api_begin(crier_http_request *r)
{
    char err[512];
    for (int attempt = 0; attempt < 2; attempt++) {
        if (crier_http_db_acquire(r, API_DB_WAIT, err, sizeof err) < 0) {
            bool busy = strstr(err, "busy") != NULL;
            return crier_http_error(r, 503, busy ? "busy" : "database_unavailable", "%s", err);
        }
        PGresult *res = PQexec(r->pg, "BEGIN");
        bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
        if (ok) {
            r->in_txn = true;
            return 0;
        }
        snprintf(err, sizeof err, "%s", PQerrorMessage(r->pg));
        crier_http_db_release(r); /* a broken connection is dropped and replaced */
    }
    crier_warn("http", "request %llu: cannot begin a transaction: %s", r->id, err);
    return crier_http_error(r, 503, "database_unavailable",
                            "the database is unavailable; retry later");
}

/* Ends the request's transaction: commit on success, roll back on any error
 * (so an error changes nothing), and gives the connection back. */
static void api_finish(crier_http_request *r)
{
    if (r->parsed) {
        PQclear(r->parsed);
        r->parsed = NULL;
    }
    if (r->pg && r->in_txn) {
        bool commit = r->status > 0 && r->status < 400;
        PGresult *res = PQexec(r->pg, commit ? "COMMIT" : "ROLLBACK");
        if (commit && PQresultStatus(res) != PGRES_COMMAND_OK) {
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            crier_warn("http", "request %llu: commit failed: %s", r->id, PQerrorMessage(r->pg));
            r->replayed = false;
            if (state && (!strcmp(state, "40001") || !strcmp(state, "40P01")))
                crier_http_error(r, 503, "conflict_retry", "a concurrent change conflicted; retry");
            else
                crier_http_error(r, 503, "database_unavailable",
                                 "the change could not be committed; retry");
        }
        PQclear(res);
        r->in_txn = false;
    }
    crier_http_db_release(r);
}

/* ------------------------------------------------------------------------
 * Responses
 */

int crier_http_reply(crier_http_request *r, unsigned status, const char *body, size_t len)
{
    r->status = status;
    r->response.len = 0;
    crier_json_buf_add(&r->response, body, len);
    return 0;
}

int crier_http_error(crier_http_request *r, unsigned status, const char *code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->status = status;
    r->content_type = NULL;
    r->response.len = 0;
    crier_json_buf_puts(&r->response, "{\"error\":{\"code\":");
    crier_json_buf_string(&r->response, code);
    crier_json_buf_puts(&r->response, ",\"message\":");
    crier_json_buf_string(&r->response, msg);
    crier_json_buf_puts(&r->response, "}}");
    return -1;
}

/* The CORS origin to answer r with, or NULL. */
static const char *api_cors_origin(crier_http_request *r)
{
    crier_http_api *api = r->api;
    const char *origin;
    if (!api->n_cors && !api->cors_any)
        return NULL;
    origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (!origin)
        return NULL;
    if (api->cors_any)
        return "*";
    for (size_t i = 0; i < api->n_cors; i++)
        if (!strcmp(api->cors[i], origin))
            return origin;
    return NULL;
}

static void api_add_cors(crier_http_request *r, struct MHD_Response *resp)
{
    const char *origin = api_cors_origin(r);
    if (!origin)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    if (strcmp(origin, "*"))
        MHD_add_response_header(resp, "Vary", "Origin");
    MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                            "Idempotent-Replayed, X-Request-Id");
    if (!strcmp(r->method, "OPTIONS")) { /* a preflight */
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type, Idempotency-Key");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
}

static enum MHD_Result api_queue(crier_http_request *r, const char *allow, bool close)
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
    if (allow)
        MHD_add_response_header(resp, "Allow", allow);
    if (r->replayed)
        MHD_add_response_header(resp, "Idempotent-Replayed", "true");
    if (close)
        MHD_add_response_header(resp, "Connection", "close");
    api_add_cors(r, resp);
    ret = MHD_queue_response(r->conn, r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ------------------------------------------------------------------------
 * Request helpers
 */

static bool api_has_controls(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return true;
    }
    return false;
}

bool crier_http_valid_id(const char *s, size_t max)
{
    size_t len;
    if (!s)
        return false;
    len = strlen(s);
    if (len == 0 || len > max)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

const char *crier_http_header(crier_http_request *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

int crier_http_arg(crier_http_request *r, const char *name, const char **out)
{
    const char *v = NULL;
    size_t len = 0;
    *out = NULL;
    if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
                                      &len) != MHD_YES)
        return 0;
    if (!v)
        v = "";
    if (strlen(v) != len || api_has_controls(v, len))
        return crier_http_error(r, 400, "invalid_field",
                                "query parameter %s holds control characters", name);
    *out = v;
    return 0;
}

int crier_http_arg_int(crier_http_request *r, const char *name, long long min, long long max,
                       long long def, long long *out)
{
    const char *v;
    char *end;
    if (crier_http_arg(r, name, &v) < 0)
        return -1;
    *out = def;
    if (!v)
        return 0;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < min || n > max || (*v < '0' || *v > '9'))
        return crier_http_error(r, 400, "invalid_field",
                                "query parameter %s must be a whole number from %lld to %lld", name,
                                min, max);
    *out = n;
    return 0;
}

int crier_http_arg_bool(crier_http_request *r, const char *name, bool def, bool *out)
{
    const char *v;
    if (crier_http_arg(r, name, &v) < 0)
        return -1;
    *out = def;
    if (!v)
        return 0;
    if (!strcmp(v, "true") || !strcmp(v, "1"))
        *out = true;
    else if (!strcmp(v, "false") || !strcmp(v, "0"))
        *out = false;
    else
        return crier_http_error(r, 400, "invalid_field", "query parameter %s must be true or false",
                                name);
    return 0;
}

int crier_http_path_id(crier_http_request *r, const char *segment, const char *what, long long *out)
{
    size_t len = strlen(segment);
    if (len == 0 || len > 18 || strspn(segment, "0123456789") != len ||
        (*out = strtoll(segment, NULL, 10)) <= 0)
        return crier_http_error(r, 400, "invalid_field",
                                "%s must be a positive whole number of at most 18 digits", what);
    return 0;
}

int crier_http_get_by_id(crier_http_request *r, const char *what, const char *sql)
{
    long long id = 0;
    char id_text[24], field[64];
    const char *values[2];
    PGresult *res;

    snprintf(field, sizeof field, "the %s id", what);
    if (crier_http_path_id(r, r->segments[2], field, &id) < 0)
        return -1;
    snprintf(id_text, sizeof id_text, "%lld", id);
    values[0] = r->tenant;
    values[1] = id_text;
    res = crier_http_query(r, sql, 2, values);
    if (!res)
        return -1;
    if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
        PQclear(res);
        return crier_http_error(r, 404, "not_found", "no %s %lld", what, id);
    }
    crier_http_reply(r, 200, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
    PQclear(res);
    return 0;
}

void crier_http_buf_items(crier_json_buf *b, PGresult *res, int limit)
{
    int n = PQntuples(res);
    crier_json_buf_puts(b, "{\"items\":[");
    for (int i = 0; i < n && i < limit; i++) {
        if (i)
            crier_json_buf_puts(b, ",");
        crier_json_buf_add(b, PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0));
    }
    crier_json_buf_puts(b, "]");
}

void crier_http_buf_cursor(crier_http_request *r, crier_json_buf *b, const char *name, PGresult *res,
                           int row, int first, int n, const char *const *scope, int n_scope)
{
    int64_t pos[CRIER_CURSOR_MAX_VALUES];
    char text[160];
    crier_json_buf_printf(b, ",\"%s\":", name);
    if (row < 0 || n > CRIER_CURSOR_MAX_VALUES) {
        crier_json_buf_puts(b, "null");
        return;
    }
    for (int c = 0; c < n; c++)
        pos[c] = strtoll(PQgetvalue(res, row, first + c), NULL, 10);
    crier_http_cursor_encode(r, scope, n_scope, pos, n, text, sizeof text);
    crier_json_buf_string(b, text);
}

/* Maps a failed statement to an error response. */
static void api_query_failed(crier_http_request *r, PGresult *res)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!state || PQstatus(r->pg) != CONNECTION_OK) {
        crier_warn("http", "request %llu: the database connection failed: %s", r->id,
                   PQerrorMessage(r->pg));
        crier_http_error(r, 503, "database_unavailable", "the database connection was lost; retry");
    } else if (!strncmp(state, "22", 2)) {
        crier_http_error(r, 400, "invalid_field", "%s", primary ? primary : "invalid value");
    } else if (!strcmp(state, "54000")) {
        crier_http_error(r, 413, "payload_too_large", "%s", primary ? primary : "too large");
    } else if (!strcmp(state, "57014") || !strcmp(state, "55P03") || !strcmp(state, "40001") ||
               !strcmp(state, "40P01")) {
        crier_http_error(r, 503, "database_timeout",
                         "the database did not answer in time (%s); retry",
                         primary ? primary : state);
    } else {
        crier_error("http", "request %llu (%s %s): %s", r->id, r->method, r->path,
                    PQresultErrorMessage(res));
        if (!strcmp(state, "42P01") || !strcmp(state, "42883") || !strcmp(state, "3F000"))
            crier_http_error(
                r, 500, "internal_error",
                "the database schema is not up to date (run crier migrate); request id %llu",
                r->id);
        else
            crier_http_error(r, 500, "internal_error",
                             "internal error; see the server log for request id %llu", r->id);
    }
}

PGresult *crier_http_query_prepared(crier_http_request *r, int id, const char *sql, int n,
                                    const char *const *values)
{
    char name[24];
    PGresult *res;
    ExecStatusType st;
    if (!r->pg || id < 0 || id > 31)
        return crier_http_query(r, sql, n, values);
    snprintf(name, sizeof name, "crier_api_%d", id);
    uint32_t *prepared = crier_http_pool_prepared(r->api->pool, r->pg_slot);
    if (!(*prepared & (1u << id))) {
        /* session-level: kept when the request's transaction rolls back */
        res = PQprepare(r->pg, name, sql, n, NULL);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            api_query_failed(r, res);
            PQclear(res);
            return NULL;
        }
        PQclear(res);
        *prepared |= 1u << id;
    }
    res = PQexecPrepared(r->pg, name, n, values, NULL, NULL, 0);
    st = PQresultStatus(res);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return res;
    api_query_failed(r, res);
    PQclear(res);
    return NULL;
}

PGresult *crier_http_query(crier_http_request *r, const char *sql, int n, const char *const *values)
{
    PGresult *res;
    ExecStatusType st;
    if (!r->pg) {
        crier_http_error(r, 500, "internal_error", "no database connection (request id %llu)",
                         r->id);
        return NULL;
    }
    res = PQexecParams(r->pg, sql, n, NULL, values, NULL, NULL, 0);
    st = PQresultStatus(res);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
        return res;
    api_query_failed(r, res);
    PQclear(res);
    return NULL;
}

int crier_http_body_fields(crier_http_request *r, const char *const *names, int n,
                           crier_http_field *out, bool empty_ok)
{
    crier_json_buf list = {0};
    crier_json_buf expected = {0};
    PGresult *res;
    const char *values[2];

    for (int i = 0; i < n; i++)
        out[i] = (crier_http_field){names[i], NULL, NULL};
    if (!r->body.data || r->body.len == 0) {
        if (empty_ok)
            return 0;
        return crier_http_error(r, 400, "malformed_json",
                                "this endpoint needs a JSON object as the request body");
    }
    if (memchr(r->body.data, '\0', r->body.len))
        return crier_http_error(r, 400, "malformed_json", "the request body holds a NUL byte");
    crier_json_buf_puts(&list, "{");
    for (int i = 0; i < n; i++) {
        crier_json_buf_printf(&list, "%s%s", i ? "," : "", names[i]);
        crier_json_buf_printf(&expected, "%s%s", i ? ", " : "", names[i]);
    }
    crier_json_buf_puts(&list, "}");
    values[0] = r->body.data;
    values[1] = list.data;
    res = PQexecParams(r->pg, "SELECT name, type, value FROM crier.api_fields($1, $2::text[])", 2,
                       NULL, values, NULL, NULL, 0);
    crier_json_buf_free(&list);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (state && (!strncmp(state, "22", 2) || !strcmp(state, "54000"))) {
            const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
            const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
            if (!strcmp(state, "54000"))
                crier_http_error(r, 413, "payload_too_large", "%s",
                                 primary ? primary : "the body is too large");
            else
                crier_http_error(r, 400, "malformed_json",
                                 "the request body is not valid JSON: %s%s%s",
                                 primary ? primary : "", detail ? ": " : "", detail ? detail : "");
        } else {
            api_query_failed(r, res);
        }
        PQclear(res);
        crier_json_buf_free(&expected);
        return -1;
    }
    if (PQntuples(res) < 1 || strcmp(PQgetvalue(res, 0, 1), "object")) {
        crier_http_error(r, 400, "invalid_field", "the request body must be a JSON object, got %s",
                         PQntuples(res) ? PQgetvalue(res, 0, 1) : "nothing");
        PQclear(res);
        crier_json_buf_free(&expected);
        return -1;
    }
    if (!PQgetisnull(res, 0, 2)) {
        crier_http_error(r, 400, "invalid_field",
                         "unknown field(s) in the request body: %s (this endpoint takes %s)",
                         PQgetvalue(res, 0, 2), expected.data ? expected.data : "none");
        PQclear(res);
        crier_json_buf_free(&expected);
        return -1;
    }
    crier_json_buf_free(&expected);
    for (int i = 0; i < n && i + 1 < PQntuples(res); i++) {
        out[i].type = PQgetisnull(res, i + 1, 1) ? NULL : PQgetvalue(res, i + 1, 1);
        out[i].value = PQgetisnull(res, i + 1, 2) ? NULL : PQgetvalue(res, i + 1, 2);
        if (out[i].type && !strcmp(out[i].type, "null")) /* null is absent */
            out[i].type = out[i].value = NULL;
    }
    if (r->parsed)
        PQclear(r->parsed);
    r->parsed = res;
    return 0;
}

/* Whether field f is there with the JSON type want ("a string"'s last
 * word): 1 yes, 0 absent (and not required), -1 error set. */
static int field_present(crier_http_request *r, const crier_http_field *f, bool required,
                         const char *want)
{
    if (!f->type) {
        if (required)
            return crier_http_error(r, 400, "invalid_field", "field %s is required", f->name);
        return 0;
    }
    if (strcmp(f->type, strrchr(want, ' ') + 1))
        return crier_http_error(r, 400, "invalid_field", "field %s must be %s, got %s", f->name,
                                want, f->type);
    return 1;
}

int crier_http_field_string(crier_http_request *r, const crier_http_field *f, bool required,
                            size_t max, bool id, const char **out)
{
    int present = field_present(r, f, required, "a string");
    *out = NULL;
    if (present <= 0)
        return present;
    size_t len = strlen(f->value);
    if (len == 0 || len > max)
        return crier_http_error(r, 400, "invalid_field", "field %s must be 1 to %zu bytes long",
                                f->name, max);
    if (id && !crier_http_valid_id(f->value, max))
        return crier_http_error(r, 400, "invalid_field",
                                "field %s must not hold control characters", f->name);
    *out = f->value;
    return 0;
}

int crier_http_field_int(crier_http_request *r, const crier_http_field *f, bool required,
                         long long min, long long max, long long def, long long *out)
{
    char *end;
    int present = field_present(r, f, required, "a number");
    *out = def;
    if (present <= 0)
        return present;
    errno = 0;
    long long v = strtoll(f->value, &end, 10);
    if (*end || errno || v < min || v > max)
        return crier_http_error(r, 400, "invalid_field",
                                "field %s must be a whole number from %lld to %lld", f->name, min,
                                max);
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------------
 * Rules
 */

void crier_http_api_rules_changed(void *ud, const char *version)
{
    crier_http_api *api = ud;
    (void)version;
    if (api)
        crier_http_rules_changed(api->rules);
}

crier_plan_status crier_http_api_validate_event(crier_http_api *api, const char *event_type,
                                                const char *payload_json, char *err, size_t err_len)
{
    return crier_http_rules_validate(api->rules, event_type, payload_json, err, err_len);
}

void crier_http_api_rules_version(crier_http_api *api, char *out, size_t len)
{
    crier_http_rules_version(api->rules, out, len);
}

double crier_http_api_max_lag(const crier_http_api *api)
{
    return api->max_lag;
}

/* ------------------------------------------------------------------------
 * Metrics
 */

void crier_http_api_write_metrics(crier_http_api *api, crier_json_buf *b)
{
    crier_http_stats_write(api->stats, b);
    crier_http_rules_write_metrics(api->rules, b);
    crier_http_streams_metrics(api->streams, b);
}

/* ------------------------------------------------------------------------
 * Routing and the libmicrohttpd callbacks
 */

/* Splits the path into segments. Returns 0, or -1 for an unusable path. */
static int api_split_path(crier_http_request *r)
{
    char *p;
    if (r->path[0] != '/')
        return -1;
    r->segment_storage = strdup(r->path + 1);
    if (!r->segment_storage)
        abort();
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

static bool api_pattern_matches(const char *pattern, crier_http_request *r)
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
static int api_route_find(crier_http_request *r, char *allow, size_t allow_len)
{
    allow[0] = '\0';
    if (api_split_path(r) < 0)
        return -1;
    for (size_t i = 0; i < API_N_ROUTES; i++) {
        if (!api_pattern_matches(api_routes[i].pattern, r))
            continue;
        if (!strcmp(api_routes[i].method, r->method))
            return (int)i;
        if (!strstr(allow, api_routes[i].method)) {
            size_t used = strlen(allow);
            snprintf(allow + used, allow_len - used, "%s%s", used ? ", " : "",
                     api_routes[i].method);
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
} api_header_check;

static enum MHD_Result api_header_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                       size_t key_size, const char *value, size_t value_size)
{
    api_header_check *c = cls;
    (void)kind;
    (void)key_size;
    if (value && (strlen(value) != value_size || api_has_controls(value, value_size))) {
        c->bad = key;
        return MHD_NO;
    }
    return MHD_YES;
}

/* Refuses requests whose headers hold control characters (CR, LF, NUL, …). */
static int api_check_headers(crier_http_request *r)
{
    api_header_check c = {NULL};
    MHD_get_connection_values_n(r->conn, MHD_HEADER_KIND, api_header_iter, &c);
    if (c.bad)
        return crier_http_error(r, 400, "invalid_header", "header %.100s holds control characters",
                                c.bad);
    return 0;
}

/* An OPTIONS request: a CORS preflight from an allowed origin gets the
 * allowed methods and headers; one from another origin a 403. */
static void api_preflight(crier_http_request *r)
{
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (origin && !api_cors_origin(r)) {
        crier_http_error(r, 403, "cors_origin_not_allowed",
                         "origin %.200s may not call this API from a browser", origin);
        return;
    }
    r->status = 204;
    r->response.len = 0;
}

static bool api_is_json(const char *content_type)
{
    size_t n = strlen("application/json");
    if (!content_type || strncasecmp(content_type, "application/json", n))
        return false;
    return content_type[n] == '\0' || content_type[n] == ';' || content_type[n] == ' ';
}

static void api_dispatch(crier_http_request *r, char *allow, size_t allow_len)
{
    const api_route *route;

    if (api_check_headers(r) < 0)
        return;
    if (!strcmp(r->method, "OPTIONS")) {
        api_preflight(r);
        snprintf(allow, allow_len, "GET, POST, OPTIONS");
        return;
    }
    if (r->body_too_large) {
        crier_http_error(r, 413, "payload_too_large", "the request body is larger than %zu bytes",
                         r->api->max_body);
        return;
    }
    r->route = api_route_find(r, allow, allow_len);
    if (r->route < 0) {
        if (allow[0])
            crier_http_error(r, 405, "method_not_allowed",
                             "%s is not allowed on %.200s (allowed: %s)", r->method, r->path,
                             allow);
        else
            crier_http_error(r, 404, "not_found", "no such endpoint: %.200s", r->path);
        return;
    }
    route = &api_routes[r->route];
    if (r->body.len > 0 && !api_is_json(crier_http_header(r, "Content-Type"))) {
        crier_http_error(r, 415, "unsupported_media_type",
                         "send the body as Content-Type: application/json");
        return;
    }
    if (route->txn) {
        if (api_begin(r) < 0)
            goto out;
        r->query_token = route->auth == ROUTE_USER_QUERY;
        if (route->auth != ROUTE_PUBLIC &&
            crier_http_authenticate(r, route->auth != ROUTE_KEY) < 0)
            goto out;
    }
    route->fn(r);
out:
    api_finish(r);
}

static enum MHD_Result api_access(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    crier_http_api *api = cls;
    crier_http_request *r = *con_cls;
    char allow[64];
    (void)version;

    if (!r) {
        const char *length;
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->api = api;
        r->conn = conn;
        r->method = method;
        r->route = -1;
        r->pg_slot = -1;
        r->started = crier_clock_s();
        r->id = atomic_fetch_add(&api->next_id, 1) + 1;
        atomic_fetch_add(&api->inflight, 1);
        *con_cls = r;
        r->path = strdup(url ? url : "/");
        if (!r->path)
            return MHD_NO;
        /* control characters in a (decoded) path match no route and must
         * not reach the log as they are */
        for (char *c = r->path; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        /* refuse an announced oversized body before it is sent */
        length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (length && strtoull(length, NULL, 10) > api->max_body) {
            r->body_too_large = true;
            r->responded = true;
            crier_http_error(r, 413, "payload_too_large",
                             "the request body is larger than %zu bytes", api->max_body);
            return api_queue(r, NULL, true);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        r->upload_seen += n;
        if (r->body_too_large) {
            /* a chunked upload past the limit is read and dropped, to answer
             * 413 at its end; one that goes on and on is cut off */
            return r->upload_seen > api->max_body * 4 + (4u << 20) ? MHD_NO : MHD_YES;
        }
        if (r->body.len + n > api->max_body) {
            r->body_too_large = true;
            crier_json_buf_free(&r->body);
            return MHD_YES;
        }
        crier_json_buf_add(&r->body, upload_data, n);
        return MHD_YES;
    }
    if (r->responded)
        return MHD_YES;
    r->responded = true;
    allow[0] = '\0';
    api_dispatch(r, allow, sizeof allow);
    return api_queue(r, allow[0] ? allow : NULL, r->body_too_large);
}

static void api_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
    crier_http_api *api = cls;
    crier_http_request *r = *con_cls;
    (void)conn;
    if (!r)
        return;
    if (r->status) {
        double took = crier_clock_s() - r->started;
        crier_http_stats_count(api->stats, r->route,
                               r->route >= 0 ? api_routes[r->route].name : NULL, r->status, took);
        if (r->status >= 500)
            crier_warn("http", "%s %s -> %u in %.1f ms (request %llu)", r->method, r->path,
                       r->status, took * 1000, r->id);
        else
            crier_debug("http", "%s %s -> %u in %.1f ms (request %llu)", r->method, r->path,
                        r->status, took * 1000, r->id);
    } else if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        crier_debug("http", "%s %s: the client went away (request %llu)", r->method, r->path,
                    r->id);
    }
    if (r->stream) /* not reached normally: api_queue hands it to the response */
        crier_http_stream_abandon(r->stream);
    if (r->parsed)
        PQclear(r->parsed);
    if (r->pg) /* not reached normally: the dispatcher gives it back */
        crier_http_db_release(r);
    crier_json_buf_free(&r->response);
    crier_json_buf_free(&r->body);
    free(r->path);
    free(r->segment_storage);
    free(r);
    *con_cls = NULL;
    atomic_fetch_sub(&api->inflight, 1);
}

static void api_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[1024];
    size_t n;
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    /* a client that went away (a closed live feed, mostly) is not a problem */
    if (strstr(msg, "no longer available for sending") || strstr(msg, "Connection reset"))
        crier_debug("http", "libmicrohttpd: %s", msg);
    else
        crier_warn("http", "libmicrohttpd: %s", msg);
}

/* ------------------------------------------------------------------------
 * Start and stop
 */

/* Parses "HOST:PORT", "[V6]:PORT", ":PORT" (all interfaces) or "PORT"
 * (loopback) into addr. Returns 0, or -1 with err set. */
static int api_parse_listen(const char *listen, struct sockaddr_storage *addr, socklen_t *addr_len,
                            char *err, size_t err_len)
{
    char host[256], port[16];
    const char *colon;
    struct addrinfo hints, *res = NULL;
    int rc;

    if (!listen || !*listen) {
        crier_set_error(err, err_len, "--http expects HOST:PORT (e.g. 127.0.0.1:8080)");
        return -1;
    }
    if (listen[0] == '[') {
        const char *close = strchr(listen, ']');
        if (!close || close[1] != ':' || (size_t)(close - listen - 1) >= sizeof host) {
            crier_set_error(err, err_len, "--http: cannot parse '%s' (expected [ADDRESS]:PORT)",
                            listen);
            return -1;
        }
        memcpy(host, listen + 1, (size_t)(close - listen - 1));
        host[close - listen - 1] = '\0';
        colon = close + 1;
    } else if ((colon = strrchr(listen, ':'))) {
        if ((size_t)(colon - listen) >= sizeof host) {
            crier_set_error(err, err_len, "--http: host too long in '%s'", listen);
            return -1;
        }
        memcpy(host, listen, (size_t)(colon - listen));
        host[colon - listen] = '\0';
    } else {
        snprintf(host, sizeof host, "127.0.0.1");
        colon = listen - 1;
    }
    snprintf(port, sizeof port, "%s", colon + 1);
    if (!port[0] || strspn(port, "0123456789") != strlen(port) || atoi(port) > 65535) {
        crier_set_error(err, err_len, "--http: '%s' has no valid port (0-65535)", listen);
        return -1;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0 || !res) {
        crier_set_error(err, err_len, "--http: cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void api_free(crier_http_api *api)
{
    if (!api)
        return;
    crier_http_streams_stop(api->streams);
    crier_http_pool_stop(api->pool);
    crier_http_rules_free(api->rules);
    crier_http_stats_free(api->stats);
    free(api->cors_storage);
    free(api);
}

static char *api_strdup(const char *s)
{
    char *p = strdup(s ? s : "");
    if (!p)
        abort();
    return p;
}

/* Parses the comma-separated --cors-origin list. */
static int api_parse_cors(crier_http_api *api, const char *list, char *err, size_t err_len)
{
    char *save = NULL;
    if (!list || !*list)
        return 0;
    api->cors_storage = api_strdup(list);
    for (char *tok = strtok_r(api->cors_storage, ", ", &save); tok;
         tok = strtok_r(NULL, ", ", &save)) {
        if (!strcmp(tok, "*")) {
            api->cors_any = true;
            continue;
        }
        if (strncmp(tok, "http://", 7) && strncmp(tok, "https://", 8)) {
            crier_set_error(err, err_len,
                            "--cors-origin: '%s' is not an origin (scheme://host[:port]) or *",
                            tok);
            return -1;
        }
        if (api->n_cors == API_MAX_CORS_ORIGINS) {
            crier_set_error(err, err_len, "--cors-origin: at most %d origins",
                            API_MAX_CORS_ORIGINS);
            return -1;
        }
        size_t len = strlen(tok);
        if (len > 8 && tok[len - 1] == '/')
            tok[len - 1] = '\0'; /* an origin has no path */
        api->cors[api->n_cors++] = tok;
    }
    return 0;
}

/* Raises the soft limit of open files towards want (each connection, live
 * feeds included, is a descriptor), up to the hard limit; warns when even
 * that is lower. */
static void api_raise_fd_limit(rlim_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return;
    rlim_t target = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    rl.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || target < want)
        crier_warn("http",
                   "open files are limited to %llu: fewer than --http-max-connections needs; raise "
                   "the limit (ulimit -n) or lower --http-max-connections",
                   (unsigned long long)target);
}

crier_http_api *crier_http_api_start(const crier_http_api_options *opts, char *err, size_t err_len)
{
    crier_http_api *api = calloc(1, sizeof *api);
    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    char version[65];
    sigset_t block, old;
    unsigned flags;
    int threads, max_connections;
    const char *conninfo = opts->conninfo ? opts->conninfo : "";

    if (!api) {
        crier_set_error(err, err_len, "out of memory");
        return NULL;
    }
    atomic_init(&api->next_id, 0);
    atomic_init(&api->inflight, 0);
    threads = opts->threads > 0 ? opts->threads : API_DEFAULT_THREADS;
    max_connections = opts->max_connections > 0 ? opts->max_connections : API_DEFAULT_CONNECTIONS;
    api_raise_fd_limit((rlim_t)max_connections + 256);
    api->max_body = opts->max_body > 0 ? opts->max_body : API_DEFAULT_MAX_BODY;
    api->max_lag = opts->healthz_max_lag > 0 ? opts->healthz_max_lag : 60.0;
    if (!(api->stats = crier_http_stats_new(API_N_ROUTES))) {
        crier_set_error(err, err_len, "out of memory");
        goto fail;
    }
    if (api_parse_cors(api, opts->cors_origins, err, err_len) < 0 ||
        api_parse_listen(opts->listen, &addr, &addr_len, err, err_len) < 0)
        goto fail;
    api->rules = crier_http_rules_load(opts->lua_dir, opts->rules_dir, opts->settings,
                                       opts->n_settings, err, err_len);
    if (!api->rules)
        goto fail;
    /* the pool opens one connection now: an unreachable database fails the
     * start, not the first request */
    if (!(api->pool = crier_http_pool_start(conninfo, threads, err, err_len)))
        goto fail;
    if (!(api->streams = crier_http_streams_start(conninfo, opts->stream_keepalive, err,
                                                  err_len)))
        goto fail;

    flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_ERROR_LOG;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* the request threads leave the signals to the engine's loop */
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    api->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, api_access, api, MHD_OPTION_EXTERNAL_LOGGER, api_mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)(threads > 1 ? threads : 0), MHD_OPTION_NOTIFY_COMPLETED, api_completed, api,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)max_connections,
        MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!api->daemon) {
        crier_set_error(err, err_len,
                        "cannot listen on %s for the HTTP API (address in use or not available?)",
                        opts->listen);
        goto fail;
    }
    {
        const union MHD_DaemonInfo *info =
            MHD_get_daemon_info(api->daemon, MHD_DAEMON_INFO_BIND_PORT);
        char host[INET6_ADDRSTRLEN] = "?";
        crier_http_rules_version(api->rules, version, sizeof version);
        api->port = info ? info->port : 0;
        if (addr.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&addr)->sin6_addr, host, sizeof host);
        else
            inet_ntop(AF_INET, &((struct sockaddr_in *)&addr)->sin_addr, host, sizeof host);
        crier_info(
            "http", "HTTP API listening on http://%s%s%s:%u (%d threads, rules version %.12s)",
            addr.ss_family == AF_INET6 ? "[" : "", host, addr.ss_family == AF_INET6 ? "]" : "",
            api->port, threads, version);
    }
    (void)addr_len;
    return api;

fail:
    api_free(api);
    return NULL;
}

unsigned crier_http_api_port(const crier_http_api *api)
{
    return api->port;
}

void crier_http_api_stop(crier_http_api *api, double deadline)
{
    MHD_socket listen_fd;
    double until;
    if (!api)
        return;
    /* live feeds end first (libmicrohttpd must not stop with parked
     * connections); their clients reconnect to another server */
    crier_http_streams_close_all(api->streams);
    listen_fd = MHD_quiesce_daemon(api->daemon);
    until = crier_clock_s() + deadline;
    /* requests being answered finish; idle keep-alive connections are closed */
    while (atomic_load(&api->inflight) > 0 && crier_clock_s() < until)
        usleep(20000);
    MHD_stop_daemon(api->daemon);
    if (listen_fd != MHD_INVALID_SOCKET)
        close(listen_fd);
    crier_info("http", "HTTP API stopped");
    api_free(api);
}
