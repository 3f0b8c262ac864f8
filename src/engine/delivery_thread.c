/* delivery_thread.c — the delivery side of crier serve on its own thread and
 * loop (see delivery_thread.h). */
#include "delivery_thread.h"

#include "alloc.h"
#include "engine.h"
#include "log.h"
#include "worker_thread.h"

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A fan-out batch's rows handed over (crier_delivery_thread_hand). */
typedef struct {
    PGresult *res; /* NULL: only the reservation comes back */
    int reserved;
} delivery_handoff;

enum { DELIVERY_THREAD_HANDOFF = CRIER_WORKER_OWN };

struct crier_delivery_thread {
    const crier_engine_config *cfg;
    struct ev_loop *loop;
    crier_pg *pg, *pg2; /* the delivery worker's two connections */
    crier_webhook_sender *webhook;
    crier_email_sender *email;
    crier_kafka_sender *kafka;
    crier_delivery *delivery;
    ev_timer poll;     /* fallback claims, independent of the owner's loop */
    ev_timer deadline; /* the shutdown deadline */
    bool stopping, released;
    crier_worker_thread *thread;
    crier_delivery_stats final_stats; /* copied at teardown */

    /* handoffs from the fan-out's threads, taken on this one */
    pthread_mutex_t handoff_lock;
    delivery_handoff *handoffs;
    size_t n_handoffs, cap_handoffs;

    /* published once per loop pass for the heartbeat (delivery_thread_idle) */
    _Atomic int in_flight;
    _Atomic uint64_t claimed;
};

/* Replaces the Kafka producer after a fatal error (the delivery worker calls
 * it once the old one holds no message): a new producer with the same
 * options; the old one stays if none can be made. */
static crier_kafka_sender *delivery_thread_kafka_renew(void *ud)
{
    crier_delivery_thread *t = ud;
    const char *why = crier_kafka_fatal_error(t->kafka);
    crier_kafka_sender *k =
        crier_kafka_sender_new(t->loop, &t->cfg->kafka, crier_delivery_on_kafka_done, t->delivery);
    if (!k) {
        crier_error("engine", "cannot make a new Kafka producer after a fatal error (%s); retrying later",
                    why ? why : "unknown");
        return t->kafka;
    }
    crier_warn("engine", "replaced the Kafka producer after a fatal error (%s)", why ? why : "unknown");
    crier_kafka_sender_free(t->kafka);
    t->kafka = k;
    return k;
}

/* At the shutdown deadline the sends still in flight are released (written
 * back as due now, for any worker); if even that cannot be written within a
 * few more seconds, the loop stops and their leases expire instead. */
static void delivery_thread_deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_delivery_thread *t = w->data;
    (void)revents;
    if (!t->released) {
        t->released = true;
        crier_warn("engine", "shutdown deadline passed with %d sends in flight: releasing them for another "
                             "worker",
                   crier_delivery_pending(t->delivery));
        crier_delivery_release(t->delivery);
        ev_timer_set(w, 5., 0.);
        ev_timer_start(loop, w);
        return;
    }
    crier_warn("engine", "could not write the released deliveries back: their leases will expire and "
                         "another worker will retry them");
    ev_break(loop, EVBREAK_ALL);
}

/* The owner's requests (worker_thread.h). */
static void delivery_thread_requests(void *ud, unsigned bits)
{
    crier_delivery_thread *t = ud;
    if ((bits & CRIER_WORKER_STOP) && !t->stopping) {
        t->stopping = true;
        crier_delivery_stop(t->delivery);
        ev_timer_stop(t->loop, &t->poll);
        ev_timer_set(&t->deadline, t->cfg->shutdown_deadline, 0.);
        ev_timer_start(t->loop, &t->deadline);
    }
    if (bits & DELIVERY_THREAD_HANDOFF) {
        pthread_mutex_lock(&t->handoff_lock);
        delivery_handoff *list = t->handoffs;
        size_t n = t->n_handoffs;
        t->handoffs = NULL;
        t->n_handoffs = t->cap_handoffs = 0;
        pthread_mutex_unlock(&t->handoff_lock);
        for (size_t i = 0; i < n; i++)
            crier_delivery_take(t->delivery, list[i].res, list[i].reserved);
        free(list);
    }
    if ((bits & CRIER_WORKER_KICK) && !t->stopping)
        crier_delivery_kick(t->delivery);
}

static bool delivery_thread_idle(void *ud)
{
    crier_delivery_thread *t = ud;
    atomic_store_explicit(&t->in_flight, crier_delivery_pending(t->delivery), memory_order_relaxed);
    atomic_store_explicit(&t->claimed, crier_delivery_get_stats(t->delivery)->claimed, memory_order_relaxed);
    return crier_delivery_idle(t->delivery);
}

void crier_delivery_thread_activity(crier_delivery_thread *t, int *in_flight, uint64_t *claimed)
{
    *in_flight = atomic_load_explicit(&t->in_flight, memory_order_relaxed);
    *claimed = atomic_load_explicit(&t->claimed, memory_order_relaxed);
}

static bool delivery_thread_drained(void *ud)
{
    crier_delivery_thread *t = ud;
    return crier_delivery_pending(t->delivery) == 0;
}

static void delivery_thread_poll_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_delivery_thread *t = w->data;
    (void)loop;
    (void)revents;
    crier_delivery_kick(t->delivery);
}

/* Stops the watchers and frees what lives on the loop (the thread has ended
 * or never started); the loop itself is worker_thread's or the caller's. */
static void delivery_thread_teardown(void *ud, struct ev_loop *loop)
{
    crier_delivery_thread *t = ud;
    ev_timer_stop(loop, &t->poll);
    ev_timer_stop(loop, &t->deadline);
    if (t->delivery)
        t->final_stats = *crier_delivery_get_stats(t->delivery);
    crier_webhook_sender_free(t->webhook);
    crier_email_sender_free(t->email);
    crier_kafka_sender_free(t->kafka);
    crier_delivery_free(t->delivery);
    crier_pg_free(t->pg);
    crier_pg_free(t->pg2);
    /* handed over after the loop ended: their leases run out, and any worker
     * takes them then */
    for (size_t i = 0; i < t->n_handoffs; i++)
        PQclear(t->handoffs[i].res);
    free(t->handoffs);
    t->handoffs = NULL;
    t->n_handoffs = t->cap_handoffs = 0;
}

crier_delivery_thread *crier_delivery_thread_start(const crier_engine_config *cfg, void (*on_change)(void *ud),
                                                   void *ud, char *err, size_t err_len)
{
    crier_delivery_thread *t = calloc(1, sizeof *t);

    if (!t) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    t->cfg = cfg;
    pthread_mutex_init(&t->handoff_lock, NULL);
    t->loop = ev_loop_new(EVFLAG_AUTO);
    if (!t->loop) {
        snprintf(err, err_len, "cannot create the delivery loop");
        goto fail;
    }
    t->pg = crier_pg_connect(t->loop, cfg->conninfo, "delivery", err, err_len);
    if (!t->pg)
        goto fail;
    t->pg2 = crier_pg_connect(t->loop, cfg->conninfo, "delivery-2", err, err_len);
    if (!t->pg2)
        goto fail;
    t->delivery = crier_delivery_new(t->loop, t->pg, t->pg2, &cfg->delivery);
    if (!t->delivery) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    t->webhook = crier_webhook_sender_new(t->loop, &cfg->webhook, crier_delivery_on_webhook_done, t->delivery);
    if (!t->webhook) {
        snprintf(err, err_len, "cannot create the webhook sender (see the log above)");
        goto fail;
    }
    if (cfg->delivery.email_url) {
        /* the sender takes as many messages as the worker may send at once
         * (those past its connections wait for one): a send it refused would
         * be a dead delivery */
        crier_email_options email = cfg->email;
        if (email.max_queued <= 0)
            email.max_queued = cfg->delivery.max_inflight;
        t->email = crier_email_sender_new(t->loop, &email, crier_delivery_on_email_done, t->delivery);
        if (!t->email) {
            snprintf(err, err_len, "cannot create the email sender (see the log above)");
            goto fail;
        }
    }
    if (cfg->kafka.bootstrap_servers) {
        t->kafka = crier_kafka_sender_new(t->loop, &cfg->kafka, crier_delivery_on_kafka_done, t->delivery);
        if (!t->kafka) {
            snprintf(err, err_len, "cannot create the Kafka producer for %s (see the log above)",
                     cfg->kafka.bootstrap_servers);
            goto fail;
        }
    }
    crier_delivery_set_senders(t->delivery, &(crier_delivery_senders){.webhook = t->webhook,
                                                                      .email = t->email,
                                                                      .kafka = t->kafka,
                                                                      .kafka_renew = delivery_thread_kafka_renew,
                                                                      .kafka_renew_ud = t});
    ev_timer_init(&t->poll, delivery_thread_poll_cb, cfg->poll_interval > 0 ? cfg->poll_interval : 1.0,
                  cfg->poll_interval > 0 ? cfg->poll_interval : 1.0);
    t->poll.data = t;
    ev_timer_start(t->loop, &t->poll);
    ev_timer_init(&t->deadline, delivery_thread_deadline_cb, 10., 0.);
    t->deadline.data = t;
    t->thread = crier_worker_thread_start(t->loop,
                                          &(crier_worker_thread_hooks){.requests = delivery_thread_requests,
                                                                       .idle = delivery_thread_idle,
                                                                       .drained = delivery_thread_drained,
                                                                       .ud = t,
                                                                       .changed = on_change,
                                                                       .owner_ud = ud},
                                          "delivery", err, err_len);
    if (!t->thread)
        goto fail;
    crier_worker_thread_request(t->thread, CRIER_WORKER_KICK);
    return t;

fail:
    if (t->loop) {
        delivery_thread_teardown(t, t->loop);
        ev_loop_destroy(t->loop);
    }
    pthread_mutex_destroy(&t->handoff_lock);
    free(t);
    return NULL;
}

void crier_delivery_thread_kick(crier_delivery_thread *t)
{
    crier_worker_thread_request(t->thread, CRIER_WORKER_KICK);
}

bool crier_delivery_thread_reserve(crier_delivery_thread *t, int n)
{
    return crier_delivery_reserve(t->delivery, n);
}

void crier_delivery_thread_hand(crier_delivery_thread *t, PGresult *res, int reserved)
{
    pthread_mutex_lock(&t->handoff_lock);
    if (t->n_handoffs == t->cap_handoffs) {
        size_t cap = t->cap_handoffs ? t->cap_handoffs * 2 : 16;
        t->handoffs = crier_xrealloc(t->handoffs, cap * sizeof *t->handoffs);
        t->cap_handoffs = cap;
    }
    t->handoffs[t->n_handoffs++] = (delivery_handoff){.res = res, .reserved = reserved};
    pthread_mutex_unlock(&t->handoff_lock);
    crier_worker_thread_request(t->thread, DELIVERY_THREAD_HANDOFF);
}

int crier_delivery_thread_lease_seconds(crier_delivery_thread *t)
{
    return crier_delivery_lease_seconds(t->delivery);
}

void crier_delivery_thread_stop(crier_delivery_thread *t)
{
    crier_worker_thread_request(t->thread, CRIER_WORKER_STOP);
}

bool crier_delivery_thread_idle(crier_delivery_thread *t)
{
    return crier_worker_thread_idle(t->thread);
}

bool crier_delivery_thread_finished(crier_delivery_thread *t)
{
    return crier_worker_thread_finished(t->thread);
}

void crier_delivery_thread_join(crier_delivery_thread *t, crier_delivery_stats *stats)
{
    if (!t)
        return;
    crier_worker_thread_join(t->thread, delivery_thread_teardown);
    /* teardown freed the worker: its totals were copied first */
    if (stats)
        *stats = t->final_stats;
    pthread_mutex_destroy(&t->handoff_lock);
    free(t);
}
