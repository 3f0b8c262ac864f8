/* http_request.h — one HTTP API request as its handler sees it: the request
 * (path, body, credentials, its database connection, the response being
 * built), what it may use of the server that runs it (crier_http_context),
 * and the toolkit every handler uses: setting the response or an error,
 * reading headers, query parameters, path ids and the fields of a JSON body.
 * The request's database work is in http_query.h.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: json_writer, log (base).
 */
#ifndef CRIER_HTTP_REQUEST_H
#define CRIER_HTTP_REQUEST_H

#include "json_writer.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    CRIER_HTTP_AUTH_NONE = 0, /* not authenticated (public endpoints) */
    CRIER_HTTP_AUTH_KEY,      /* a tenant's API key: acts for any user of the tenant */
    CRIER_HTTP_AUTH_USER      /* a user token: one person's own feed */
} crier_http_auth_kind;

#define CRIER_HTTP_MAX_SEGMENTS 8
#define CRIER_HTTP_ID_MAX 200 /* tenant and user ids, idempotency keys */
#define CRIER_HTTP_SECRET_MAX 64
#define CRIER_HTTP_PAGE_MAX 100      /* largest page of a list (a larger ?limit is refused) */
#define CRIER_HTTP_JSON_MAX_DEPTH 64 /* deepest nesting of [ and { in a request's JSON */

struct crier_http_pool;
struct crier_http_rules;
struct crier_http_streams;
struct crier_http_stats;
struct crier_http_cors;
struct crier_http_guard;
struct crier_http_stream;

/* What a request may use of the server that runs it: set up once by the
 * server (http_server.c) and shared, unchanged, by every request. */
typedef struct {
    struct crier_http_pool *pool;       /* database connections (http_pool.h) */
    struct crier_http_rules *rules;     /* validates intake (http_rules.h) */
    struct crier_http_streams *streams; /* live feeds (http_stream.h) */
    struct crier_http_stats *stats;     /* request counters (http_stats.h) */
    struct crier_http_cors *cors;       /* the origins browsers may call from (http_cors.h) */
    struct crier_http_guard *guard;     /* read deadlines, live-feed slots (http_guard.h) */
    size_t max_body;                    /* largest request body in bytes */
    double healthz_max_lag;             /* seconds the oldest due event or delivery may wait */
    double no_worker_check_from;        /* monotonic seconds from which /healthz requires a live
                                           worker (the server's start plus its worker grace) */
    const char *operator_key;           /* the status page's key (http_operator.h); NULL:
                                           loopback clients only */
} crier_http_context;

/* One request, from its headers to the completed response. */
typedef struct crier_http_request {
    const crier_http_context *ctx;
    struct MHD_Connection *conn;
    const char *method;
    char *path;                              /* copy of the URL path */
    char *segments[CRIER_HTTP_MAX_SEGMENTS]; /* the path's segments (a second copy, split) */
    int n_segments;
    char *segment_storage;
    int route;             /* index in the route table, -1 when none */
    unsigned long long id; /* request id (X-Request-Id) */
    double started;        /* monotonic seconds */

    crier_json_buf body; /* request body (NUL-terminated; data NULL when empty) */
    size_t upload_seen;  /* bytes uploaded, kept or not */
    bool body_too_large;

    PGconn *pg; /* the request's database connection, while it holds one */
    int pg_slot;
    bool in_txn;
    PGresult *parsed; /* the parsed body's fields (crier_http_body_fields) */

    crier_http_auth_kind auth;
    char tenant[CRIER_HTTP_ID_MAX + 1];          /* "" until authenticated */
    char user[CRIER_HTTP_ID_MAX + 1];            /* user tokens only */
    long long token_exp;                         /* user tokens only: expiry, unix seconds */
    long long key_id;                            /* API keys only */
    unsigned char secret[CRIER_HTTP_SECRET_MAX]; /* the tenant's secret: tokens, cursors */
    size_t secret_len;

    unsigned status; /* 0 until a response is set */
    crier_json_buf response;
    const char *content_type;         /* NULL: application/json */
    bool replayed;                    /* Idempotent-Replayed: true */
    bool query_token;                 /* the route takes a user token in ?access_token= */
    struct crier_http_stream *stream; /* a live feed: the response is this stream */
    bool responded;                   /* queued early (an oversized upload) */
    bool stream_slot;                 /* holds a live-feed slot (http_guard.h) until it completes */
    bool page;                        /* an HTML page: sent with a Content-Security-Policy that
                                         allows only its own inline script and style, no framing */
} crier_http_request;

/* Sets the response: status and a JSON (or content_type) body of len bytes,
 * copied. Returns 0. */
int crier_http_reply(crier_http_request *r, unsigned status, const char *body, size_t len);

/* Sets an error response {"error": {"code": code, "message": message}} with
 * status. Returns -1 (so handlers can `return crier_http_error(...)`). */
int crier_http_error(crier_http_request *r, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sets the error response for a statement that failed on the request's
 * connection (res may be NULL), from its SQLSTATE: 400 invalid_field (data
 * exceptions), 413 (too large), 503 (timeouts, conflicts, lost connection),
 * 500 (anything else, logged with the request id). */
void crier_http_error_from_result(crier_http_request *r, const PGresult *res);

/* A request header's value (NULL when absent). Every header was checked for
 * control characters before the handler runs. */
const char *crier_http_header(crier_http_request *r, const char *name);

/* True when the len bytes at s hold a control character other than tab
 * (a NUL, CR, LF, DEL, …). */
bool crier_http_has_controls(const char *s, size_t len);

/* A query parameter: *out is its (decoded) value or NULL when absent.
 * Returns 0, or -1 with a 400 set when the value holds control characters
 * or a NUL. */
int crier_http_arg(crier_http_request *r, const char *name, const char **out);

/* An integer query parameter within [min, max], def when absent. Returns 0,
 * or -1 with a 400 invalid_field set. */
int crier_http_arg_int(crier_http_request *r, const char *name, long long min, long long max,
                       long long def, long long *out);

/* A boolean query parameter (true/false/1/0), def when absent. */
int crier_http_arg_bool(crier_http_request *r, const char *name, bool def, bool *out);

/* True when s is a usable id: 1..max bytes, no control characters. */
bool crier_http_valid_id(const char *s, size_t max);

/* Parses a path segment as a positive id (1..18 digits). Returns 0, or -1
 * with a 400 invalid_field naming what. */
int crier_http_path_id(crier_http_request *r, const char *segment, const char *what,
                       long long *out);

/* One field of a parsed JSON body: type is the JSON type ("string",
 * "number", "object", "array", "boolean", "null"), NULL when absent; value is
 * a string's text or the JSON text of anything else. Valid until the request
 * ends. */
typedef struct {
    const char *name;
    const char *type;
    const char *value;
} crier_http_field;

/* Parses the request body (PostgreSQL parses it: no JSON parser here) as a
 * JSON object with the fields names[0..n) and no others, into out[0..n).
 * The router has already refused a body nested deeper than
 * CRIER_HTTP_JSON_MAX_DEPTH.
 * An empty body is {} when empty_ok. Returns 0, or -1 with 400
 * malformed_json (not JSON, a NUL byte) or invalid_field (not an object, an
 * unknown field) set. Needs the request's transaction. */
int crier_http_body_fields(crier_http_request *r, const char *const *names, int n,
                           crier_http_field *out, bool empty_ok);

/* True when the len bytes of JSON text at s nest arrays and objects deeper
 * than max_depth levels: a byte scan counting [ and { outside strings
 * (escapes honoured), not a parse, so that it can run before anything
 * parses the text, whatever the text is, in one pass and no memory. */
bool crier_http_json_too_deep(const char *s, size_t len, int max_depth);

/* Field accessors: a string field of 1..max bytes (ids: no control
 * characters), an integer field within [min, max]. An absent field gives
 * NULL / def unless required. Return 0, or -1 with 400 invalid_field. */
int crier_http_field_string(crier_http_request *r, const crier_http_field *f, bool required,
                            size_t max, bool id, const char **out);
int crier_http_field_int(crier_http_request *r, const crier_http_field *f, bool required,
                         long long min, long long max, long long def, long long *out);

#endif
