/* worker_thread.c — a libev loop on its own thread, driven by request bits
 * (see worker_thread.h). */
#include "worker_thread.h"

#include "log.h"

#include <ev.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct crier_worker_thread {
    struct ev_loop *loop;
    crier_worker_thread_hooks hooks;
    ev_async wake;
    ev_prepare before_sleep;
    pthread_t thread;
    bool stopping; /* the thread's own view */

    /* shared with the owner's thread */
    atomic_uint requests;
    atomic_bool idle;
    atomic_bool finished;
};

/* The owner's requests. idle is cleared before the requests are taken, so an
 * owner that sees no request pending and then idle sees the truth. */
static void worker_thread_wake_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    crier_worker_thread *t = w->data;
    (void)loop;
    (void)revents;
    atomic_store(&t->idle, false);
    unsigned bits = atomic_exchange(&t->requests, 0u);
    if (bits & CRIER_WORKER_STOP)
        t->stopping = true;
    if (bits)
        t->hooks.requests(t->hooks.ud, bits);
}

/* Once per loop pass before it blocks: ends the loop when a stop has drained
 * the work, else publishes idleness. */
static void worker_thread_before_sleep_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    crier_worker_thread *t = w->data;
    (void)revents;
    if (t->stopping && t->hooks.drained(t->hooks.ud)) {
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    bool idle = t->hooks.idle(t->hooks.ud) && atomic_load(&t->requests) == 0u;
    if (atomic_exchange(&t->idle, idle) != idle && idle)
        t->hooks.changed(t->hooks.owner_ud);
}

static void *worker_thread_main(void *arg)
{
    crier_worker_thread *t = arg;
    ev_run(t->loop, 0);
    atomic_store(&t->finished, true);
    t->hooks.changed(t->hooks.owner_ud);
    return NULL;
}

crier_worker_thread *crier_worker_thread_start(struct ev_loop *loop, const crier_worker_thread_hooks *hooks,
                                               const char *name, char *err, size_t err_len)
{
    crier_worker_thread *t = calloc(1, sizeof *t);
    sigset_t all, old;
    int rc;

    if (!t) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    t->loop = loop;
    t->hooks = *hooks;
    ev_async_init(&t->wake, worker_thread_wake_cb);
    t->wake.data = t;
    ev_async_start(loop, &t->wake);
    ev_prepare_init(&t->before_sleep, worker_thread_before_sleep_cb);
    t->before_sleep.data = t;
    ev_prepare_start(loop, &t->before_sleep);

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits the mask */
    rc = pthread_create(&t->thread, NULL, worker_thread_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, err_len, "cannot start the %s thread: %s", name, strerror(rc));
        ev_async_stop(loop, &t->wake);
        ev_prepare_stop(loop, &t->before_sleep);
        free(t);
        return NULL;
    }
    return t;
}

void crier_worker_thread_request(crier_worker_thread *t, unsigned bits)
{
    atomic_fetch_or(&t->requests, bits);
    ev_async_send(t->loop, &t->wake);
}

bool crier_worker_thread_idle(crier_worker_thread *t)
{
    /* the requests first: see worker_thread_wake_cb */
    return atomic_load(&t->requests) == 0u && atomic_load(&t->idle);
}

bool crier_worker_thread_finished(crier_worker_thread *t)
{
    return atomic_load(&t->finished);
}

void crier_worker_thread_join(crier_worker_thread *t, void (*teardown)(void *ud, struct ev_loop *loop))
{
    if (!t)
        return;
    crier_worker_thread_request(t, CRIER_WORKER_STOP);
    pthread_join(t->thread, NULL);
    ev_async_stop(t->loop, &t->wake);
    ev_prepare_stop(t->loop, &t->before_sleep);
    if (teardown)
        teardown(t->hooks.ud, t->loop);
    ev_loop_destroy(t->loop);
    free(t);
}
