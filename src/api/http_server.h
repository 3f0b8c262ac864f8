/* http_server.h — the HTTP API of crier serve (JSON over HTTP/1.1, libmicrohttpd).
 *
 * It runs beside the engine, not on its libev loop: libmicrohttpd's own
 * threads (a pool of --http-threads, each polling its connections) accept and
 * parse requests; a request's handler runs on its pool thread and takes a
 * blocking PostgreSQL connection from a small mutex-protected pool (one per
 * thread), runs the whole request in one transaction (committed only when the
 * answer is a success: an error changes nothing) and answers. Connections can
 * be suspended (MHD_ALLOW_SUSPEND_RESUME), so a long-lived endpoint such as
 * Server-Sent Events can park a connection without holding a thread.
 *
 * The API validates intake with its own generation of the rules, loaded from
 * the same directories and settings as the engine's and reloaded lazily after
 * the engine accepts a new version (crier_http_api_rules_changed).
 *
 * The first half of this header is the server's public face (cmd_serve.c);
 * the second half is what the endpoint handlers (http_handlers_*.c) and the
 * authentication (http_auth.c) share: the request, response helpers, query
 * helpers (the JSON writer is base/json_writer.h). */
#ifndef CRIER_HTTP_API_H
#define CRIER_HTTP_API_H

#include "json_writer.h"
#include "rules.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    /* "HOST:PORT", "[V6]:PORT", ":PORT" (every interface) or "PORT"
     * (loopback); port 0 picks a free one (logged, crier_http_api_port) */
    const char *listen;
    int threads;              /* request threads and database connections (default 4) */
    size_t max_body;          /* largest request body in bytes (default 1 MiB) */
    int max_connections;      /* open connections, live feeds included (default 1024) */
    const char *cors_origins; /* comma-separated exact origins, or "*"; NULL: no CORS */
    double healthz_max_lag;   /* seconds the oldest due event may wait (default 60) */
    const char *conninfo;     /* libpq connection string */
    const char *lua_dir;      /* the rules, as given to the engine */
    const char *rules_dir;
    const crier_setting *settings;
    size_t n_settings;
    double stream_keepalive;  /* seconds between comment lines on live feeds (default 15) */
} crier_http_api_options;

typedef struct crier_http_api crier_http_api;

/* Loads the rules, checks the database, binds the address and starts the
 * request threads. Returns the running API, or NULL with err set (a bad
 * address, a port in use, rules that do not load, no database). */
crier_http_api *crier_http_api_start(const crier_http_api_options *opts, char *err, size_t err_len);

/* The port the API listens on (useful with port 0). */
unsigned crier_http_api_port(const crier_http_api *api);

/* Tells the API that the engine accepted a new rules version: the API
 * reloads its own copy before the next intake. Safe from any thread; ud is
 * the crier_http_api (the signature of crier_engine_config.on_rules_reloaded). */
void crier_http_api_rules_changed(void *ud, const char *version);

/* Stops accepting connections, lets requests in flight finish for up to
 * deadline seconds, then closes everything and frees api. NULL is a no-op. */
void crier_http_api_stop(crier_http_api *api, double deadline);

/* ------------------------------------------------------------------------
 * Shared by the handlers (http_handlers_*.c) and http_auth.c.
 */

typedef enum {
    CRIER_HTTP_AUTH_NONE = 0, /* not authenticated (public endpoints) */
    CRIER_HTTP_AUTH_KEY,      /* a tenant's API key: acts for any user of the tenant */
    CRIER_HTTP_AUTH_USER      /* a user token: one person's own feed */
} crier_http_auth_kind;

#define CRIER_HTTP_MAX_SEGMENTS 8
#define CRIER_HTTP_ID_MAX 200 /* tenant and user ids, idempotency keys */
#define CRIER_HTTP_SECRET_MAX 64
#define CRIER_HTTP_PAGE_MAX 100 /* largest page of a list (a larger ?limit is refused) */

/* One feed item as JSON, from the columns of crier.feed aliased f. */
#define CRIER_HTTP_FEED_ITEM_JSON                                                                  \
    "json_build_object('id', f.id, 'kind', f.kind, 'type', f.event_type, 'content', f.content,"    \
    " 'created_at', f.created_at, 'read', f.read, 'seen', f.seen, 'archived', f.archived)"

/* The feed's statements (crier bench feed's baseline runs the same texts):
 * a page ($1 tenant, $2 user, $3 before, $4 limit, $5 archived), the first
 * page (no cursor: $3 limit, $4 archived; prepared per connection), the
 * counts ($1, $2) and mark-all ($1, $2, $3 what, $4 upto). */
#define CRIER_HTTP_SQL_FEED_PAGE                                                                   \
    "SELECT " CRIER_HTTP_FEED_ITEM_JSON                                                            \
    ", f.id FROM crier.feed($1, $2, $3::bigint, $4::int, $5::bool) f ORDER BY f.id DESC"
#define CRIER_HTTP_SQL_FEED_FIRST_PAGE                                                             \
    "SELECT " CRIER_HTTP_FEED_ITEM_JSON                                                            \
    ", f.id FROM crier.feed($1, $2, NULL, $3::int, $4::bool) f ORDER BY f.id DESC"
#define CRIER_HTTP_SQL_FEED_COUNTS                                                                 \
    "SELECT json_build_object('unread', c.unread, 'unseen', c.unseen)"                             \
    " FROM crier.feed_counts($1, $2) c"
#define CRIER_HTTP_SQL_FEED_MARK_ALL "SELECT crier.feed_mark_all($1, $2, $3, $4::bigint)"

struct crier_http_stream;

/* One request, from its headers to the completed response. */
typedef struct crier_http_request {
    crier_http_api *api;
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
    size_t upload_seen; /* bytes uploaded, kept or not */
    bool body_too_large;

    PGconn *pg; /* the request's database connection, while it holds one */
    int pg_slot;
    bool in_txn;
    PGresult *parsed; /* the parsed body's fields (crier_http_body_fields) */

    crier_http_auth_kind auth;
    char tenant[CRIER_HTTP_ID_MAX + 1];
    char user[CRIER_HTTP_ID_MAX + 1];            /* user tokens only */
    long long token_exp;                         /* user tokens only: expiry, unix seconds */
    long long key_id;                            /* API keys only */
    unsigned char secret[CRIER_HTTP_SECRET_MAX]; /* the tenant's secret: tokens, cursors */
    size_t secret_len;

    unsigned status; /* 0 until a response is set */
    crier_json_buf response;
    const char *content_type; /* NULL: application/json */
    bool replayed;            /* Idempotent-Replayed: true */
    bool query_token;         /* the route takes a user token in ?access_token= */
    struct crier_http_stream *stream; /* a live feed: the response is this stream */
    bool responded;           /* queued early (an oversized upload) */
} crier_http_request;

/* Sets the response: status and a JSON (or content_type) body of len bytes,
 * copied. Returns 0. */
int crier_http_reply(crier_http_request *r, unsigned status, const char *body, size_t len);

/* Sets an error response {"error": {"code": code, "message": message}} with
 * status. Returns -1 (so handlers can `return crier_http_error(...)`). */
int crier_http_error(crier_http_request *r, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The API's live feeds hub (http_stream.h). */
struct crier_http_streams *crier_http_api_streams(crier_http_api *api);

/* A request header's value (NULL when absent). Every header was checked for
 * control characters before the handler runs. */
const char *crier_http_header(crier_http_request *r, const char *name);

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

/* GET of one object by the id in path segment 2: runs sql with ($1 tenant,
 * $2 id), which returns one JSON value (NULL when the tenant has no such
 * object), and answers it, or 404 "no <what> <id>" (another tenant's object
 * is not found, like a missing one). Returns 0 or -1 like a handler. */
int crier_http_get_by_id(crier_http_request *r, const char *what, const char *sql);

/* Appends {"items":[…] with the JSON text in column 0 of the first limit rows
 * of res (the caller adds the rest of the object and the closing brace). */
void crier_http_buf_items(crier_json_buf *b, PGresult *res, int limit);

/* Appends ,"name": and the cursor (crier_http_cursor_encode with scope) of
 * row's columns first..first+n-1 as the position, or null when row < 0. */
void crier_http_buf_cursor(crier_http_request *r, crier_json_buf *b, const char *name, PGresult *res,
                           int row, int first, int n, const char *const *scope, int n_scope);

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
 * An empty body is {} when empty_ok. Returns 0, or -1 with 400
 * malformed_json (not JSON, a NUL byte) or invalid_field (not an object, an
 * unknown field) set. Needs the request's transaction. */
int crier_http_body_fields(crier_http_request *r, const char *const *names, int n,
                           crier_http_field *out, bool empty_ok);

/* Field accessors: a string field of 1..max bytes (ids: no control
 * characters), an integer field within [min, max]. An absent field gives
 * NULL / def unless required. Return 0, or -1 with 400 invalid_field. */
int crier_http_field_string(crier_http_request *r, const crier_http_field *f, bool required,
                            size_t max, bool id, const char **out);
int crier_http_field_int(crier_http_request *r, const crier_http_field *f, bool required,
                         long long min, long long max, long long def, long long *out);

/* Runs sql with n text parameters on the request's connection. Returns the
 * result (the caller clears it), or NULL with an error response set from the
 * SQLSTATE: 400 invalid_field (data exceptions), 413 (too large), 503
 * (timeouts, lost connection), 500 (anything else, logged). */
PGresult *crier_http_query(crier_http_request *r, const char *sql, int n,
                           const char *const *values);

/* The same for a hot statement, prepared once per pooled connection (so it
 * is parsed and, where PostgreSQL's plan cache decides so, planned once).
 * id (0..31, one per statement text) names it. */
enum { CRIER_HTTP_STMT_FEED_FIRST_PAGE };
PGresult *crier_http_query_prepared(crier_http_request *r, int id, const char *sql, int n,
                                    const char *const *values);

/* Takes a database connection for a handler that runs without the
 * dispatcher's transaction (health, metrics), waiting up to wait_s seconds.
 * Returns 0, or -1 (no error response set: the caller decides). */
int crier_http_db_acquire(crier_http_request *r, double wait_s, char *err, size_t err_len);

/* Gives the request's connection back to the pool (a broken one is replaced
 * on the next acquire). No-op without one. */
void crier_http_db_release(crier_http_request *r);

/* Runs ev's type and payload through the API's rules generation (reloaded
 * first when the engine accepted a new version). */
crier_plan_status crier_http_api_validate_event(crier_http_api *api, const char *event_type,
                                                const char *payload_json, char *err,
                                                size_t err_len);

/* The /healthz threshold, and the version of the API's rules. */
double crier_http_api_max_lag(const crier_http_api *api);
void crier_http_api_rules_version(crier_http_api *api, char *out, size_t len);

/* Appends the API's own metrics (request counters, rules reloads) in the
 * Prometheus text format. */
void crier_http_api_write_metrics(crier_http_api *api, crier_json_buf *b);

/* The endpoints (http_handlers_*.c). Each sets the response and returns 0,
 * or sets an error response and returns -1. */
int crier_http_events_create(crier_http_request *r); /* POST /v1/events */
int crier_http_events_get(crier_http_request *r);    /* GET /v1/events/{id} */
int crier_http_tokens_create(crier_http_request *r); /* POST /v1/tokens */
int crier_http_feed_list(crier_http_request *r);     /* GET /v1/feed */
int crier_http_feed_counts(crier_http_request *r);   /* GET /v1/feed/counts */
int crier_http_feed_mark_all(crier_http_request *r); /* POST /v1/feed/read-all, /v1/feed/seen-all */
int crier_http_feed_item(crier_http_request *r);     /* POST /v1/feed/items/{id}/{action} */
int crier_http_feed_stream(crier_http_request *r);   /* GET /v1/feed/stream (Server-Sent Events) */
int crier_http_notifications_get(crier_http_request *r); /* GET /v1/notifications/{id} */
int crier_http_dead_list(crier_http_request *r);         /* GET /v1/dead */
int crier_http_dead_replay(crier_http_request *r);       /* POST /v1/dead/replay */
int crier_http_metrics(crier_http_request *r);           /* GET /metrics */
int crier_http_healthz(crier_http_request *r);           /* GET /healthz */

#endif
