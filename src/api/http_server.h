/* http_server.h — the HTTP API of crier serve (JSON over HTTP/1.1,
 * libmicrohttpd): its public face, used by cmd_serve.c.
 *
 * It runs beside the engine, not on its libev loop: libmicrohttpd's own
 * threads (a pool of --http-threads, each polling its connections) accept and
 * parse requests; a request's handler runs on its pool thread and takes a
 * blocking PostgreSQL connection from a small mutex-protected pool (one per
 * thread, http_pool.h), runs the whole request in one transaction (committed
 * only when the answer is a success: an error changes nothing, http_query.h)
 * and answers. Connections can be suspended (MHD_ALLOW_SUSPEND_RESUME), so a
 * long-lived endpoint such as Server-Sent Events (http_stream.h) can park a
 * connection without holding a thread.
 *
 * One client cannot lock the others out: connections are limited in total
 * and per client address (libmicrohttpd's limits), a request must arrive
 * within the read timeout, and live feeds have their own slots
 * (http_guard.h).
 *
 * The API validates intake with its own generation of the rules (http_rules.h),
 * loaded from the same directories and settings as the engine's and reloaded
 * lazily after the engine accepts a new version
 * (crier_http_server_rules_changed).
 *
 * Inside src/api/, from the bottom up: the pieces a request may use (pool,
 * rules generation, counters: http_pool, http_rules, http_stats), the request
 * toolkit (http_request, http_query), credentials and cursors (http_auth),
 * pages (http_page), live feeds (http_stream), the endpoints (http_handlers*),
 * routing and CORS (http_router, http_cors), the framing check of a
 * request's headers (http_framing), read deadlines and live-feed slots
 * (http_guard), and this server on top: nothing below includes this
 * header.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_router, http_framing, http_guard, http_cors, http_pool, http_query,
 * http_rules, http_stats, http_stream; clock, log (base).
 */
#ifndef CRIER_HTTP_SERVER_H
#define CRIER_HTTP_SERVER_H

#include "rules.h"

#include <stddef.h>

typedef struct {
    /* "HOST:PORT", "[V6]:PORT", ":PORT" (every interface) or "PORT"
     * (loopback); port 0 picks a free one (logged, crier_http_server_port) */
    const char *listen;
    int threads;              /* request threads and database connections (default 4) */
    size_t max_body;          /* largest request body in bytes (default 1 MiB) */
    int max_connections;      /* open connections, live feeds included (default 1024) */
    int max_per_address;      /* open connections per client address (0: the default, 64;
                                 negative: no limit) */
    double read_timeout;      /* seconds a request's headers and body may take to arrive,
                                 and a kept-alive connection may idle (0: the default, 10) */
    int max_streams;          /* live feeds open at once (0: the default, half of
                                 max_connections) */
    const char *cors_origins; /* comma-separated exact origins, or "*"; NULL: no CORS */
    double healthz_max_lag;   /* seconds the oldest due event or delivery may wait (default 60) */
    double worker_grace;      /* seconds after start during which /healthz does not require a
                                 live worker (this process's own first heartbeat is coming);
                                 0: none (an API-only process) */
    const char *conninfo;     /* libpq connection string */
    const char *lua_dir;      /* the rules, as given to the engine */
    const char *rules_dir;
    const crier_setting *settings; /* kept, not copied: must outlive the server */
    size_t n_settings;
    double stream_keepalive; /* seconds between comment lines on live feeds (default 15) */
    const char *operator_key; /* the status page's Bearer key (http_operator.h), kept, not
                                 copied; NULL: the page answers loopback clients only */
} crier_http_server_options;

typedef struct crier_http_server crier_http_server;

/* Loads the rules, checks the database, binds the address and starts the
 * request threads. Returns the running server (crier_http_server_stop frees
 * it), or NULL with err set (a bad address, a port in use, rules that do not
 * load, no database). */
crier_http_server *crier_http_server_start(const crier_http_server_options *opts, char *err,
                                           size_t err_len);

/* The port the server listens on (useful with port 0). */
unsigned crier_http_server_port(const crier_http_server *server);

/* Tells the server that the engine accepted a new rules version: the API
 * reloads its own copy before the next intake. Safe from any thread; ud is
 * the crier_http_server (the signature of crier_engine_config.on_rules_reloaded). */
void crier_http_server_rules_changed(void *ud, const char *version);

/* Stops accepting connections, ends the live feeds, lets requests in flight
 * finish for up to deadline seconds, then closes everything and frees
 * server. NULL is a no-op. */
void crier_http_server_stop(crier_http_server *server, double deadline);

#endif
