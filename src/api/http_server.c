/* http_server.c — the HTTP API server: the libmicrohttpd daemon and its
 * callbacks (a request's life from its first byte to its completion), and
 * starting and stopping it with the pieces it lends its requests (see
 * http_server.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_server.h"

#include "clock.h"
#include "http_cors.h"
#include "http_framing.h"
#include "http_guard.h"
#include "http_pool.h"
#include "http_query.h"
#include "http_router.h"
#include "http_rules.h"
#include "http_stats.h"
#include "http_stream.h"
#include "log.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SERVER_DEFAULT_THREADS 4
#define SERVER_DEFAULT_MAX_BODY (1024 * 1024)
#define SERVER_DEFAULT_CONNECTIONS 1024
#define SERVER_DEFAULT_PER_ADDRESS 64
#define SERVER_DEFAULT_READ_TIMEOUT 10.0

struct crier_http_server {
    struct MHD_Daemon *daemon;
    unsigned port;
    atomic_ullong next_id;
    atomic_int inflight;    /* requests between their first byte and their completion */
    crier_http_context ctx; /* what requests use: pool, rules, live feeds, counters, CORS */
};

/* ------------------------------------------------------------------------
 * The libmicrohttpd callbacks
 */

static enum MHD_Result server_access(void *cls, struct MHD_Connection *conn, const char *url,
                                     const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **con_cls)
{
    crier_http_server *server = cls;
    crier_http_request *r = *con_cls;
    char allow[64];

    if (!r) {
        const char *length;
        char framing[256];
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->ctx = &server->ctx;
        r->conn = conn;
        r->method = method;
        r->route = -1;
        r->pg_slot = -1;
        r->started = crier_clock_s();
        r->id = atomic_fetch_add(&server->next_id, 1) + 1;
        atomic_fetch_add(&server->inflight, 1);
        *con_cls = r;
        r->path = strdup(url ? url : "/");
        if (!r->path)
            return MHD_NO;
        /* control characters in a (decoded) path match no route and must
         * not reach the log as they are */
        for (char *c = r->path; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        /* refuse framing a proxy in front could read differently, before
         * any of the body is read, and close the connection: what follows
         * on it must not be taken for another request */
        if (crier_http_framing_check(conn, version, framing, sizeof framing) < 0) {
            r->responded = true;
            crier_debug("http", "%s %s refused: %s (request %llu)", method, r->path, framing,
                        r->id);
            crier_http_error(r, 400, "invalid_framing", "%s", framing);
            return crier_http_route_respond(r, NULL, true);
        }
        /* refuse an announced oversized body before it is sent */
        length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (length && strtoull(length, NULL, 10) > server->ctx.max_body) {
            r->body_too_large = true;
            r->responded = true;
            crier_http_error(r, 413, "payload_too_large",
                             "the request body is larger than %zu bytes", server->ctx.max_body);
            return crier_http_route_respond(r, NULL, true);
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
            return r->upload_seen > server->ctx.max_body * 4 + (4u << 20) ? MHD_NO : MHD_YES;
        }
        if (r->body.len + n > server->ctx.max_body) {
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
    crier_http_guard_answering(conn); /* the request has arrived: no read deadline */
    allow[0] = '\0';
    crier_http_route_dispatch(r, allow, sizeof allow);
    return crier_http_route_respond(r, allow[0] ? allow : NULL, r->body_too_large);
}

static void server_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                             enum MHD_RequestTerminationCode toe)
{
    crier_http_server *server = cls;
    crier_http_request *r = *con_cls;
    /* a kept-alive connection waits for its next request from now on */
    crier_http_guard_waiting(conn);
    if (!r)
        return;
    if (r->status) {
        double took = crier_clock_s() - r->started;
        crier_http_stats_count(server->ctx.stats, r->route, crier_http_route_label(r->route),
                               r->status, took);
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
    if (r->stream) /* not reached normally: the router hands it to the response */
        crier_http_stream_abandon(r->stream);
    if (r->stream_slot)
        crier_http_guard_stream_release(server->ctx.guard);
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
    atomic_fetch_sub(&server->inflight, 1);
}

/* libmicrohttpd's messages that describe what a client did, not a problem
 * of the server: logged at debug level (a flood of bad clients must not
 * flood the log) */
static bool server_mhd_client_message(const char *msg)
{
    static const char *const client[] = {
        "no longer available for sending", /* a client that went away (a closed live feed) */
        "Connection reset",
        "closed by remote side", /* went away mid-request, or cut by the read deadline */
        "disconnected when reading request",
        "socket is closed when reading",
        "Failed to parse `Content-Length'", /* a Content-Length that is not a number */
        "Too large value of 'Content-Length'",
        "without `Host' header",
    };
    for (size_t i = 0; i < sizeof client / sizeof client[0]; i++)
        if (strstr(msg, client[i]))
            return true;
    /* libmicrohttpd's own 4xx answers to requests it cannot read */
    return strstr(msg, "HTTP response code is 4") != NULL;
}

static void server_mhd_log(void *cls, const char *fmt, va_list ap)
{
    crier_http_server *server = cls;
    char msg[1024];
    size_t n;
    vsnprintf(msg, sizeof msg, fmt, ap);
    n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    if (strstr(msg, "reached connection limit"))
        crier_http_guard_refused(server->ctx.guard); /* counted, warned about now and then */
    else if (server_mhd_client_message(msg))
        crier_debug("http", "libmicrohttpd: %s", msg);
    else
        crier_warn("http", "libmicrohttpd: %s", msg);
}

/* ------------------------------------------------------------------------
 * Start and stop
 */

/* Parses "HOST:PORT", "[V6]:PORT", ":PORT" (all interfaces) or "PORT"
 * (loopback) into addr. Returns 0, or -1 with err set. */
static int server_parse_listen(const char *listen, struct sockaddr_storage *addr,
                               socklen_t *addr_len, char *err, size_t err_len)
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

static void server_free(crier_http_server *server)
{
    if (!server)
        return;
    crier_http_streams_stop(server->ctx.streams);
    crier_http_guard_stop(server->ctx.guard);
    crier_http_pool_stop(server->ctx.pool);
    crier_http_rules_free(server->ctx.rules);
    crier_http_stats_free(server->ctx.stats);
    crier_http_cors_free(server->ctx.cors);
    free(server);
}

/* Raises the soft limit of open files towards want (each connection, live
 * feeds included, is a descriptor), up to the hard limit; warns when even
 * that is lower. */
static void server_raise_fd_limit(rlim_t want)
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

crier_http_server *crier_http_server_start(const crier_http_server_options *opts, char *err,
                                           size_t err_len)
{
    crier_http_server *server = calloc(1, sizeof *server);
    crier_http_context *ctx;
    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    char version[65];
    sigset_t block, old;
    unsigned flags;
    int threads, max_connections, per_address, max_streams;
    double read_timeout;
    const char *conninfo = opts->conninfo ? opts->conninfo : "";

    if (!server) {
        crier_set_error(err, err_len, "out of memory");
        return NULL;
    }
    ctx = &server->ctx;
    atomic_init(&server->next_id, 0);
    atomic_init(&server->inflight, 0);
    threads = opts->threads > 0 ? opts->threads : SERVER_DEFAULT_THREADS;
    max_connections =
        opts->max_connections > 0 ? opts->max_connections : SERVER_DEFAULT_CONNECTIONS;
    per_address = opts->max_per_address == 0  ? SERVER_DEFAULT_PER_ADDRESS
                  : opts->max_per_address < 0 ? 0 /* libmicrohttpd's "no limit" */
                                              : opts->max_per_address;
    read_timeout = opts->read_timeout > 0 ? opts->read_timeout : SERVER_DEFAULT_READ_TIMEOUT;
    max_streams = opts->max_streams > 0     ? opts->max_streams
                  : max_connections / 2 > 0 ? max_connections / 2
                                            : 1;
    server_raise_fd_limit((rlim_t)max_connections + 256);
    ctx->max_body = opts->max_body > 0 ? opts->max_body : SERVER_DEFAULT_MAX_BODY;
    ctx->healthz_max_lag = opts->healthz_max_lag > 0 ? opts->healthz_max_lag : 60.0;
    ctx->operator_key = opts->operator_key && *opts->operator_key ? opts->operator_key : NULL;
    ctx->no_worker_check_from = crier_clock_s() + (opts->worker_grace > 0 ? opts->worker_grace : 0);
    if (!(ctx->stats = crier_http_stats_new(crier_http_route_count()))) {
        crier_set_error(err, err_len, "out of memory");
        goto fail;
    }
    if (!(ctx->cors = crier_http_cors_parse(opts->cors_origins, err, err_len)) ||
        server_parse_listen(opts->listen, &addr, &addr_len, err, err_len) < 0)
        goto fail;
    ctx->rules = crier_http_rules_load(opts->lua_dir, opts->rules_dir, opts->settings,
                                       opts->n_settings, err, err_len);
    if (!ctx->rules)
        goto fail;
    /* the pool opens one connection now: an unreachable database fails the
     * start, not the first request */
    if (!(ctx->pool = crier_http_pool_start(conninfo, threads, err, err_len)))
        goto fail;
    if (!(ctx->streams = crier_http_streams_start(conninfo, opts->stream_keepalive, err, err_len)))
        goto fail;
    if (!(ctx->guard = crier_http_guard_start(read_timeout, max_streams, err, err_len)))
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
    server->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, server_access, server, MHD_OPTION_EXTERNAL_LOGGER, server_mhd_log,
        server, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)(threads > 1 ? threads : 0), MHD_OPTION_NOTIFY_COMPLETED, server_completed,
        server, MHD_OPTION_NOTIFY_CONNECTION, crier_http_guard_notify, ctx->guard,
        /* idle time while an answer is sent; the guard bounds the reading */
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)per_address,
        MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!server->daemon) {
        crier_set_error(err, err_len,
                        "cannot listen on %s for the HTTP API (address in use or not available?)",
                        opts->listen);
        goto fail;
    }
    {
        const union MHD_DaemonInfo *info =
            MHD_get_daemon_info(server->daemon, MHD_DAEMON_INFO_BIND_PORT);
        char host[INET6_ADDRSTRLEN] = "?";
        crier_http_rules_version(ctx->rules, version, sizeof version);
        server->port = info ? info->port : 0;
        if (addr.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&addr)->sin6_addr, host, sizeof host);
        else
            inet_ntop(AF_INET, &((struct sockaddr_in *)&addr)->sin_addr, host, sizeof host);
        crier_info("http",
                   "HTTP API listening on http://%s%s%s:%u (%d threads, rules version %.12s)",
                   addr.ss_family == AF_INET6 ? "[" : "", host,
                   addr.ss_family == AF_INET6 ? "]" : "", server->port, threads, version);
        crier_debug("http",
                    "connections: %d in all, %d per address (0: no limit), %d live feeds; read "
                    "timeout %.3g s",
                    max_connections, per_address, max_streams, read_timeout);
    }
    (void)addr_len;
    return server;

fail:
    server_free(server);
    return NULL;
}

unsigned crier_http_server_port(const crier_http_server *server)
{
    return server->port;
}

void crier_http_server_rules_changed(void *ud, const char *version)
{
    crier_http_server *server = ud;
    (void)version;
    if (server)
        crier_http_rules_changed(server->ctx.rules);
}

void crier_http_server_stop(crier_http_server *server, double deadline)
{
    MHD_socket listen_fd;
    double until;
    if (!server)
        return;
    /* live feeds end first (libmicrohttpd must not stop with parked
     * connections); their clients reconnect to another server */
    crier_http_streams_close_all(server->ctx.streams);
    listen_fd = MHD_quiesce_daemon(server->daemon);
    until = crier_clock_s() + deadline;
    /* requests being answered finish; idle keep-alive connections are closed */
    while (atomic_load(&server->inflight) > 0 && crier_clock_s() < until)
        usleep(20000);
    MHD_stop_daemon(server->daemon);
    if (listen_fd != MHD_INVALID_SOCKET)
        close(listen_fd);
    crier_info("http", "HTTP API stopped");
    server_free(server);
}
