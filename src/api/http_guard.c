/* http_guard.c — the HTTP API's read deadlines, live-feed slots and refusal
 * count (see http_guard.h).
 *
 * Every open connection has a record in one list under the guard's lock,
 * found from libmicrohttpd through the connection's socket context. The
 * guard's thread wakes a few times per read timeout and shuts down (it does
 * not close: the descriptor stays libmicrohttpd's) each connection past its
 * deadline. libmicrohttpd tells the guard that a connection closed before it
 * closes the descriptor, and that notice waits for the lock, so the
 * descriptor the thread shuts down is never one already reused.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_guard.h"

#include "clock.h"
#include "log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define GUARD_WARN_EVERY 10.0 /* seconds between warnings about refused connections */

typedef struct guard_conn {
    struct guard_conn *prev, *next;
    crier_http_guard *guard;
    int fd;
    double deadline; /* monotonic seconds; 0 while a request is being answered */
    bool answered;   /* a request was answered on it: past its deadline it is only idle */
    bool cut;        /* shut down by the guard */
    char address[INET6_ADDRSTRLEN];
} guard_conn;

struct crier_http_guard {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool stopping;
    double read_timeout, tick;
    int max_streams;
    guard_conn *head; /* under lock */
    atomic_int streams;
    atomic_ullong read_timeouts, streams_refused, refused;
    unsigned long long refused_warned; /* under lock: refusals already warned about */
    double refused_warned_at;          /* under lock */
};

static void guard_lock(crier_http_guard *g)
{
    pthread_mutex_lock(&g->lock);
}

static void guard_unlock(crier_http_guard *g)
{
    pthread_mutex_unlock(&g->lock);
}

/* Shuts down the connections past their deadlines. Under the lock. */
static void guard_sweep(crier_http_guard *g)
{
    double now = crier_clock_s();
    for (guard_conn *c = g->head; c; c = c->next) {
        if (c->cut || c->deadline <= 0 || now < c->deadline)
            continue;
        shutdown(c->fd, SHUT_RDWR);
        c->cut = true;
        atomic_fetch_add(&g->read_timeouts, 1);
        crier_debug("http", "closed a connection from %s: %s within --http-read-timeout (%.3g s)",
                    c->address, c->answered ? "no next request" : "no complete request",
                    g->read_timeout);
    }
}

static void *guard_main(void *arg)
{
    crier_http_guard *g = arg;
    guard_lock(g);
    while (!g->stopping) {
        struct timespec until;
        guard_sweep(g);
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t)g->tick;
        until.tv_nsec += (long)((g->tick - (double)(time_t)g->tick) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->wake, &g->lock, &until);
    }
    guard_unlock(g);
    return NULL;
}

crier_http_guard *crier_http_guard_start(double read_timeout, int max_streams, char *err,
                                         size_t err_len)
{
    crier_http_guard *g = calloc(1, sizeof *g);
    pthread_condattr_t attr;
    if (!g) {
        crier_set_error(err, err_len, "out of memory");
        return NULL;
    }
    g->read_timeout = read_timeout;
    /* deadlines are kept to within a tenth of the timeout, at most 250 ms late */
    g->tick = read_timeout / 10 < 0.25 ? read_timeout / 10 : 0.25;
    if (g->tick < 0.01)
        g->tick = 0.01;
    g->max_streams = max_streams;
    atomic_init(&g->streams, 0);
    atomic_init(&g->read_timeouts, 0);
    atomic_init(&g->streams_refused, 0);
    atomic_init(&g->refused, 0);
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        crier_set_error(err, err_len, "cannot start the HTTP API's connection guard thread");
        pthread_cond_destroy(&g->wake);
        pthread_mutex_destroy(&g->lock);
        free(g);
        return NULL;
    }
    return g;
}

void crier_http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                             enum MHD_ConnectionNotificationCode code)
{
    crier_http_guard *g = cls;
    guard_conn *c;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *addr =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        /* one record per connection, its number set by the clients: checked,
         * and a connection without one simply has no deadline */
        if (!fd || !(c = calloc(1, sizeof *c)))
            return;
        c->guard = g;
        c->fd = fd->connect_fd;
        snprintf(c->address, sizeof c->address, "?");
        if (addr && addr->client_addr) {
            const struct sockaddr *sa = addr->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->address,
                          sizeof c->address);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->address,
                          sizeof c->address);
        }
        guard_lock(g);
        c->deadline = crier_clock_s() + g->read_timeout;
        c->next = g->head;
        if (g->head)
            g->head->prev = c;
        g->head = c;
        guard_unlock(g);
        *socket_context = c;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && (c = *socket_context)) {
        guard_lock(g);
        if (c->prev)
            c->prev->next = c->next;
        else
            g->head = c->next;
        if (c->next)
            c->next->prev = c->prev;
        guard_unlock(g);
        free(c);
        *socket_context = NULL;
    }
}

/* The guard's record of conn, or NULL when it has none. */
static guard_conn *guard_conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

void crier_http_guard_answering(struct MHD_Connection *conn)
{
    guard_conn *c = guard_conn_of(conn);
    if (!c)
        return;
    guard_lock(c->guard);
    c->deadline = 0;
    guard_unlock(c->guard);
}

void crier_http_guard_waiting(struct MHD_Connection *conn)
{
    guard_conn *c = guard_conn_of(conn);
    if (!c)
        return;
    guard_lock(c->guard);
    c->deadline = crier_clock_s() + c->guard->read_timeout;
    c->answered = true;
    guard_unlock(c->guard);
}

int crier_http_guard_stream_acquire(crier_http_guard *g)
{
    if (atomic_fetch_add(&g->streams, 1) >= g->max_streams) {
        atomic_fetch_sub(&g->streams, 1);
        atomic_fetch_add(&g->streams_refused, 1);
        return -1;
    }
    return 0;
}

void crier_http_guard_stream_release(crier_http_guard *g)
{
    atomic_fetch_sub(&g->streams, 1);
}

int crier_http_guard_max_streams(const crier_http_guard *g)
{
    return g->max_streams;
}

void crier_http_guard_refused(crier_http_guard *g)
{
    unsigned long long total = atomic_fetch_add(&g->refused, 1) + 1, since = 0;
    double now = crier_clock_s();
    guard_lock(g);
    if (g->refused_warned_at == 0 || now - g->refused_warned_at >= GUARD_WARN_EVERY) {
        since = total - g->refused_warned;
        g->refused_warned = total;
        g->refused_warned_at = now;
    }
    guard_unlock(g);
    if (since)
        crier_warn("http",
                   "refused %llu connection(s) over the connection limits since the last warning "
                   "(--http-max-connections in total, --http-max-per-address per client "
                   "address; behind a proxy every client has the proxy's address)",
                   since);
}

void crier_http_guard_metrics(crier_http_guard *g, crier_json_buf *b)
{
    crier_json_buf_printf(
        b,
        "# HELP crier_http_read_timeouts_total Connections closed for sending no complete "
        "request within --http-read-timeout.\n"
        "# TYPE crier_http_read_timeouts_total counter\n"
        "crier_http_read_timeouts_total %llu\n"
        "# HELP crier_http_connections_refused_total Connections refused over "
        "--http-max-connections or --http-max-per-address.\n"
        "# TYPE crier_http_connections_refused_total counter\n"
        "crier_http_connections_refused_total %llu\n"
        "# HELP crier_http_streams_refused_total Live feeds refused with every slot taken.\n"
        "# TYPE crier_http_streams_refused_total counter\n"
        "crier_http_streams_refused_total %llu\n"
        "# HELP crier_http_stream_slots Live feeds allowed at once (--http-max-streams).\n"
        "# TYPE crier_http_stream_slots gauge\n"
        "crier_http_stream_slots %d\n"
        "# HELP crier_http_stream_slots_used Live-feed slots taken.\n"
        "# TYPE crier_http_stream_slots_used gauge\n"
        "crier_http_stream_slots_used %d\n",
        (unsigned long long)atomic_load(&g->read_timeouts),
        (unsigned long long)atomic_load(&g->refused),
        (unsigned long long)atomic_load(&g->streams_refused), g->max_streams,
        atomic_load(&g->streams));
}

void crier_http_guard_stop(crier_http_guard *g)
{
    if (!g)
        return;
    guard_lock(g);
    g->stopping = true;
    pthread_cond_signal(&g->wake);
    guard_unlock(g);
    pthread_join(g->thread, NULL);
    /* the daemon has closed every connection; any record left is freed */
    while (g->head) {
        guard_conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g);
}
