/* curl_ev.c — libcurl multi on libev: socket and timer callbacks, completion
 * dispatch, close deferred past running callbacks (see curl_ev.h).
 *
 * Parked watchers: when a transfer ends, curl stops asking about its socket
 * (CURL_POLL_REMOVE) and the connection waits in curl's cache; the next
 * transfer on it asks again at once. Stopping and starting an ev_io for that
 * cost a failed epoll_ctl per request (libev leaves a stopped fd registered,
 * so the restart's EPOLL_CTL_ADD met EEXIST) and a free and calloc. A watcher
 * that waited for reading only is parked instead: it stays active, filed under
 * its fd, and the next ask takes it back. Should the idle connection become
 * readable meanwhile (the peer closed it), the parked watcher is dropped
 * without telling curl, which checks a cached connection before reusing it.
 * A watcher that waited for writing is never parked (it would fire at once). */
#include "curl_ev.h"

#include "log.h"

#include <ev.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct curl_ev_socket curl_ev_socket;

/* The ev_io watching one socket curl told us about. */
struct curl_ev_socket {
    ev_io io;
    crier_curl_ev *owner;
    curl_socket_t fd;
    curl_ev_socket *prev, *next;
};

struct crier_curl_ev {
    struct ev_loop *loop;
    CURLM *multi;
    ev_timer timer;
    const char *module;
    crier_curl_ev_done_fn done;
    crier_curl_ev_destroy_fn destroy;
    void *ud;
    curl_ev_socket *sockets; /* doubly linked, parked ones too */
    curl_ev_socket **parked; /* by fd: the parked watcher of that socket, or NULL */
    size_t parked_cap;
    curl_socket_t *fds;      /* every socket opened through us and not yet closed */
    size_t nfds, fds_cap;
    int dispatching; /* > 0 while done callbacks may run */
    int closing;     /* close was requested */
};

static void curl_ev_destroy(crier_curl_ev *c)
{
    curl_ev_socket *ws, *next;

    ev_timer_stop(c->loop, &c->timer);
    c->destroy(c->ud);
    /* Cached connections get a goodbye (SMTP QUIT) from curl_multi_cleanup,
     * which waits for the reply; shut the sockets down first so that fails at once. */
    for (size_t i = 0; i < c->nfds; i++)
        shutdown(c->fds[i], SHUT_RDWR);
    /* Closes cached connections; may still call the socket callback. */
    curl_multi_cleanup(c->multi);
    for (ws = c->sockets; ws; ws = next) {
        next = ws->next;
        ev_io_stop(c->loop, &ws->io);
        free(ws);
    }
    ev_timer_stop(c->loop, &c->timer);
    free(c->parked);
    free(c->fds);
    free(c);
}

/* Reads curl's completion messages and dispatches them. Runs only from the
 * loop's watcher callbacks, so done is never called from inside add. */
static void curl_ev_drain(crier_curl_ev *c)
{
    CURLMsg *m;
    int left;

    c->dispatching++;
    while (!c->closing && (m = curl_multi_info_read(c->multi, &left)) != NULL) {
        CURL *easy;
        CURLcode code;

        if (m->msg != CURLMSG_DONE)
            continue;
        easy = m->easy_handle;
        code = m->data.result;
        curl_multi_remove_handle(c->multi, easy);
        c->done(c->ud, easy, code);
    }
    c->dispatching--;
    if (c->closing && c->dispatching == 0)
        curl_ev_destroy(c);
}

/* Whether ws is parked: filed under its fd. */
static bool curl_ev_socket_parked(const crier_curl_ev *c, const curl_ev_socket *ws)
{
    return ws->fd >= 0 && (size_t)ws->fd < c->parked_cap && c->parked[ws->fd] == ws;
}

/* Stops and frees a watcher (unfiling it if parked). */
static void curl_ev_socket_drop(crier_curl_ev *c, curl_ev_socket *ws)
{
    ev_io_stop(c->loop, &ws->io);
    if (curl_ev_socket_parked(c, ws))
        c->parked[ws->fd] = NULL;
    if (ws->prev)
        ws->prev->next = ws->next;
    else
        c->sockets = ws->next;
    if (ws->next)
        ws->next->prev = ws->prev;
    free(ws);
}

/* curl no longer asks about ws's socket: parks the watcher if it waited for
 * reading only (see the top of this file), else drops it. */
static void curl_ev_socket_park(crier_curl_ev *c, curl_ev_socket *ws)
{
    size_t fd = (size_t)ws->fd;

    if (ws->fd < 0 || !ev_is_active(&ws->io) || (ws->io.events & (EV_READ | EV_WRITE)) != EV_READ) {
        curl_ev_socket_drop(c, ws);
        return;
    }
    if (fd >= c->parked_cap) {
        size_t cap = c->parked_cap ? c->parked_cap : 64;
        curl_ev_socket **parked;

        while (cap <= fd)
            cap *= 2;
        parked = realloc(c->parked, cap * sizeof *parked);
        if (!parked) {
            curl_ev_socket_drop(c, ws);
            return;
        }
        memset(parked + c->parked_cap, 0, (cap - c->parked_cap) * sizeof *parked);
        c->parked = parked;
        c->parked_cap = cap;
    }
    if (c->parked[fd])
        curl_ev_socket_drop(c, c->parked[fd]);
    c->parked[fd] = ws;
}

/* The parked watcher of fd, unfiled, or NULL. */
static curl_ev_socket *curl_ev_socket_unpark(crier_curl_ev *c, curl_socket_t fd)
{
    curl_ev_socket *ws;

    if (fd < 0 || (size_t)fd >= c->parked_cap || !(ws = c->parked[fd]))
        return NULL;
    c->parked[fd] = NULL;
    return ws;
}

static void curl_ev_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    curl_ev_socket *ws = w->data;
    crier_curl_ev *c = ws->owner;
    curl_socket_t fd = ws->fd; /* ws may be freed inside socket_action */
    int action = 0, running = 0;

    (void)loop;
    if (curl_ev_socket_parked(c, ws)) {
        /* an idle cached connection became readable: stop watching it */
        curl_ev_socket_drop(c, ws);
        return;
    }
    if (revents & EV_READ)
        action |= CURL_CSELECT_IN;
    if (revents & EV_WRITE)
        action |= CURL_CSELECT_OUT;
    if (revents & EV_ERROR)
        action |= CURL_CSELECT_ERR;
    curl_multi_socket_action(c->multi, fd, action, &running);
    curl_ev_drain(c);
}

static void curl_ev_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_curl_ev *c = w->data;
    int running = 0;

    (void)loop;
    (void)revents;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    curl_ev_drain(c);
}

/* CURLMOPT_SOCKETFUNCTION: keeps one ev_io per socket in step with what curl
 * wants to wait for. */
static int curl_ev_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    crier_curl_ev *c = userp;
    curl_ev_socket *ws = socketp;
    int events = 0;

    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (ws) {
            curl_multi_assign(c->multi, fd, NULL);
            curl_ev_socket_park(c, ws);
        }
        return 0;
    }
    if (what & CURL_POLL_IN)
        events |= EV_READ;
    if (what & CURL_POLL_OUT)
        events |= EV_WRITE;
    if (!ws && (ws = curl_ev_socket_unpark(c, fd)) != NULL)
        curl_multi_assign(c->multi, fd, ws);
    if (!ws) {
        ws = calloc(1, sizeof *ws);
        if (!ws) {
            crier_warn(c->module, "out of memory for a socket watcher");
            return -1;
        }
        ws->owner = c;
        ws->fd = fd;
        ws->next = c->sockets;
        if (c->sockets)
            c->sockets->prev = ws;
        c->sockets = ws;
        ev_init(&ws->io, curl_ev_io_cb);
        ws->io.data = ws;
        curl_multi_assign(c->multi, fd, ws);
    } else if (ev_is_active(&ws->io) && (ws->io.events & (EV_READ | EV_WRITE)) == events) {
        return 0; /* already waiting for just that */
    } else {
        ev_io_stop(c->loop, &ws->io);
    }
    ev_io_set(&ws->io, fd, events);
    ev_io_start(c->loop, &ws->io);
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: (re)arms the single ev_timer. Never calls
 * socket_action itself; a 0 timeout fires on the next loop pass. */
static int curl_ev_curl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    crier_curl_ev *c = userp;

    (void)multi;
    ev_timer_stop(c->loop, &c->timer);
    if (timeout_ms >= 0) {
        ev_timer_set(&c->timer, (double)timeout_ms / 1000.0, 0.0);
        ev_timer_start(c->loop, &c->timer);
    }
    return 0;
}

/* CURLOPT_OPENSOCKETFUNCTION: opens the socket (close-on-exec) and records it
 * so that close can shut it down before curl says goodbye on it. */
static curl_socket_t curl_ev_open_socket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
    crier_curl_ev *c = clientp;
    curl_socket_t fd;

    if (purpose != CURLSOCKTYPE_IPCXN)
        return CURL_SOCKET_BAD;
    if (c->nfds == c->fds_cap) {
        size_t cap = c->fds_cap ? 2 * c->fds_cap : 16;
        curl_socket_t *fds = realloc(c->fds, cap * sizeof *fds);

        if (!fds)
            return CURL_SOCKET_BAD;
        c->fds = fds;
        c->fds_cap = cap;
    }
    fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
    if (fd != CURL_SOCKET_BAD)
        c->fds[c->nfds++] = fd;
    return fd;
}

/* CURLOPT_OPENSOCKETFUNCTION of guarded transfers: asks the guard, then opens
 * and records the socket as above. */
static curl_socket_t curl_ev_open_guarded_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *addr)
{
    crier_curl_ev_guard *g = clientp;

    if (purpose != CURLSOCKTYPE_IPCXN || !g->check(g->ud, &addr->addr, (socklen_t)addr->addrlen))
        return CURL_SOCKET_BAD;
    return curl_ev_open_socket_cb(g->owner, purpose, addr);
}

/* CURLOPT_CLOSESOCKETFUNCTION: forgets and closes a socket opened above. */
static int curl_ev_close_socket_cb(void *clientp, curl_socket_t fd)
{
    crier_curl_ev *c = clientp;
    curl_ev_socket *ws = curl_ev_socket_unpark(c, fd);

    /* a parked watcher must not outlive its socket (the number is reused) */
    if (ws)
        curl_ev_socket_drop(c, ws);
    for (size_t i = 0; i < c->nfds; i++) {
        if (c->fds[i] == fd) {
            c->fds[i] = c->fds[--c->nfds];
            break;
        }
    }
    return close(fd);
}

CURLMcode crier_curl_ev_limit_connections(crier_curl_ev *c, long n)
{
    return curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, n);
}

crier_curl_ev *crier_curl_ev_new(struct ev_loop *loop, long max_connects, const char *module,
                                 crier_curl_ev_done_fn done, crier_curl_ev_destroy_fn destroy, void *ud)
{
    crier_curl_ev *c = calloc(1, sizeof *c);

    if (!c)
        goto fail;
    c->loop = loop;
    c->module = module;
    c->done = done;
    c->destroy = destroy;
    c->ud = ud;
    ev_timer_init(&c->timer, curl_ev_timer_cb, 0.0, 0.0);
    c->timer.data = c;
    c->multi = curl_multi_init();
    if (!c->multi)
        goto fail;
    if (curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, curl_ev_socket_cb) != CURLM_OK ||
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c) != CURLM_OK ||
        curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, curl_ev_curl_timer_cb) != CURLM_OK ||
        curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c) != CURLM_OK ||
        curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, max_connects) != CURLM_OK)
        goto fail;
    return c;
fail:
    crier_warn(module, "could not create the libcurl multi handle");
    if (c && c->multi)
        curl_multi_cleanup(c->multi);
    free(c);
    return NULL;
}

CURLcode crier_curl_ev_set_trust(CURL *easy, const char *ca_file)
{
    CURLcode rc = curl_easy_setopt(easy, CURLOPT_CAPATH, NULL);

    if (rc == CURLE_OK && ca_file)
        rc = curl_easy_setopt(easy, CURLOPT_CAINFO, ca_file);
    return rc;
}

/* Sets easy's socket callbacks (open through open_cb with open_data) and adds it. */
static int curl_ev_add_with(crier_curl_ev *c, CURL *easy, curl_opensocket_callback open_cb, void *open_data)
{
    CURLMcode mc;

    if (curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, open_cb) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, open_data) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, curl_ev_close_socket_cb) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, c) != CURLE_OK) {
        crier_warn(c->module, "cannot set the socket callbacks of a transfer");
        return -1;
    }
    mc = curl_multi_add_handle(c->multi, easy);
    if (mc != CURLM_OK) {
        crier_warn(c->module, "curl_multi_add_handle: %s", curl_multi_strerror(mc));
        return -1;
    }
    return 0;
}

int crier_curl_ev_add(crier_curl_ev *c, CURL *easy)
{
    return curl_ev_add_with(c, easy, curl_ev_open_socket_cb, c);
}

int crier_curl_ev_add_guarded(crier_curl_ev *c, CURL *easy, crier_curl_ev_guard *guard)
{
    guard->owner = c;
    return curl_ev_add_with(c, easy, curl_ev_open_guarded_cb, guard);
}

void crier_curl_ev_remove(crier_curl_ev *c, CURL *easy)
{
    curl_multi_remove_handle(c->multi, easy);
}

bool crier_curl_ev_closing(const crier_curl_ev *c)
{
    return c->closing != 0;
}

void crier_curl_ev_close(crier_curl_ev *c)
{
    if (!c || c->closing)
        return;
    c->closing = 1;
    /* Called from inside a done callback: finish once dispatch unwinds. */
    if (c->dispatching > 0)
        return;
    curl_ev_destroy(c);
}
