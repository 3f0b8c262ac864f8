/* delivery_thread.c — the delivery side of crier serve on its own thread and
 * loop (see delivery_thread.h). */
#include "delivery_thread.h"

#include "engine.h"
#include "log.h"

#include <ev.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct crier_delivery_thread {
    const crier_engine_config *cfg;
    struct ev_loop *loop;
    crier_pg *pg;
    crier_webhook_sender *webhook;
    crier_email_sender *email;
    crier_kafka_sender *kafka;
    crier_delivery *delivery;
    ev_async wake;          /* the owner's requests: kick, stop */
    ev_timer poll;          /* fallback claims, independent of the owner's loop */
    ev_timer deadline;      /* the shutdown deadline */
    ev_prepare before_sleep;
    pthread_t thread;
    bool started;
    bool stopping, released; /* the loop's own view (delivery thread only) */
    void (*on_change)(void *ud);
    void *on_change_ud;

    /* shared with the owner's thread */
    atomic_bool kick_requested;
    atomic_bool stop_requested;
    atomic_bool idle;
    atomic_bool finished;
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

/* The owner's requests. idle is cleared before the kick request is, so an
 * owner that sees no kick pending and then idle sees the truth. */
static void delivery_thread_wake_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    crier_delivery_thread *t = w->data;
    (void)revents;
    if (atomic_load(&t->stop_requested) && !t->stopping) {
        t->stopping = true;
        crier_delivery_stop(t->delivery);
        ev_timer_stop(loop, &t->poll);
        ev_timer_set(&t->deadline, t->cfg->shutdown_deadline, 0.);
        ev_timer_start(loop, &t->deadline);
    }
    if (atomic_load(&t->kick_requested)) {
        atomic_store(&t->idle, false);
        atomic_store(&t->kick_requested, false);
        if (!t->stopping)
            crier_delivery_kick(t->delivery);
    }
}

static void delivery_thread_poll_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_delivery_thread *t = w->data;
    (void)loop;
    (void)revents;
    crier_delivery_kick(t->delivery);
}

/* Once per loop pass before it blocks: publishes idleness, ends the loop
 * when a stop has drained the sends. */
static void delivery_thread_before_sleep_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    crier_delivery_thread *t = w->data;
    (void)revents;
    if (t->stopping && crier_delivery_pending(t->delivery) == 0) {
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    bool idle = crier_delivery_idle(t->delivery) && !atomic_load(&t->kick_requested);
    if (atomic_exchange(&t->idle, idle) != idle && idle)
        t->on_change(t->on_change_ud);
}

static void *delivery_thread_main(void *arg)
{
    crier_delivery_thread *t = arg;
    crier_delivery_kick(t->delivery);
    ev_run(t->loop, 0);
    atomic_store(&t->finished, true);
    t->on_change(t->on_change_ud);
    return NULL;
}

/* Frees what start made (the thread has ended or never started). */
static void delivery_thread_free(crier_delivery_thread *t)
{
    if (t->loop) {
        ev_async_stop(t->loop, &t->wake);
        ev_timer_stop(t->loop, &t->poll);
        ev_timer_stop(t->loop, &t->deadline);
        ev_prepare_stop(t->loop, &t->before_sleep);
    }
    crier_webhook_sender_free(t->webhook);
    crier_email_sender_free(t->email);
    crier_kafka_sender_free(t->kafka);
    crier_delivery_free(t->delivery);
    crier_pg_free(t->pg);
    if (t->loop)
        ev_loop_destroy(t->loop);
    free(t);
}

crier_delivery_thread *crier_delivery_thread_start(const crier_engine_config *cfg, void (*on_change)(void *ud),
                                                   void *ud, char *err, size_t err_len)
{
    crier_delivery_thread *t = calloc(1, sizeof *t);
    sigset_t all, old;

    if (!t) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    t->cfg = cfg;
    t->on_change = on_change;
    t->on_change_ud = ud;
    t->loop = ev_loop_new(EVFLAG_AUTO);
    if (!t->loop) {
        snprintf(err, err_len, "cannot create the delivery loop");
        goto fail;
    }
    t->pg = crier_pg_connect(t->loop, cfg->conninfo, "delivery", err, err_len);
    if (!t->pg)
        goto fail;
    t->delivery = crier_delivery_new(t->loop, t->pg, &cfg->delivery);
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
        t->email = crier_email_sender_new(t->loop, &cfg->email, crier_delivery_on_email_done, t->delivery);
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
    ev_async_init(&t->wake, delivery_thread_wake_cb);
    t->wake.data = t;
    ev_async_start(t->loop, &t->wake);
    ev_timer_init(&t->poll, delivery_thread_poll_cb, cfg->poll_interval > 0 ? cfg->poll_interval : 1.0,
                  cfg->poll_interval > 0 ? cfg->poll_interval : 1.0);
    t->poll.data = t;
    ev_timer_start(t->loop, &t->poll);
    ev_timer_init(&t->deadline, delivery_thread_deadline_cb, 10., 0.);
    t->deadline.data = t;
    ev_prepare_init(&t->before_sleep, delivery_thread_before_sleep_cb);
    t->before_sleep.data = t;
    ev_prepare_start(t->loop, &t->before_sleep);

    /* signals belong to the owner's loop: the thread starts with them blocked */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&t->thread, NULL, delivery_thread_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, err_len, "cannot start the delivery thread: %s", strerror(rc));
        goto fail;
    }
    t->started = true;
    return t;

fail:
    delivery_thread_free(t);
    return NULL;
}

void crier_delivery_thread_kick(crier_delivery_thread *t)
{
    atomic_store(&t->kick_requested, true);
    ev_async_send(t->loop, &t->wake);
}

void crier_delivery_thread_stop(crier_delivery_thread *t)
{
    atomic_store(&t->stop_requested, true);
    ev_async_send(t->loop, &t->wake);
}

bool crier_delivery_thread_idle(crier_delivery_thread *t)
{
    /* the kick flag first: see delivery_thread_wake_cb */
    return !atomic_load(&t->kick_requested) && atomic_load(&t->idle);
}

bool crier_delivery_thread_finished(crier_delivery_thread *t)
{
    return atomic_load(&t->finished);
}

void crier_delivery_thread_join(crier_delivery_thread *t, crier_delivery_stats *stats)
{
    if (!t)
        return;
    if (t->started) {
        crier_delivery_thread_stop(t);
        pthread_join(t->thread, NULL);
    }
    if (stats)
        *stats = *crier_delivery_get_stats(t->delivery);
    delivery_thread_free(t);
}
