/* fanout_thread.c — a fan-out worker (the slow lane, or one of the fast
 * lane's) on its own thread (see fanout_thread.h). */
#include "fanout_thread.h"

#include "engine.h"
#include "log.h"
#include "rules_query.h"
#include "worker_thread.h"

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Events per batch in the slow lane. */
#define FANOUT_THREAD_BATCH 10

/* A request of this worker's own: a new rules generation waits in next_rules. */
#define FANOUT_THREAD_RULES CRIER_WORKER_OWN

struct crier_fanout_thread {
    struct ev_loop *loop;
    crier_pg *pg;
    crier_fanout *fanout;
    crier_rules_query *query; /* the lane's own crier.query runner */
    ev_timer poll;            /* fallback claims */
    crier_worker_thread *thread;
    crier_fanout_stats final_stats;

    pthread_mutex_t lock; /* guards next_rules */
    crier_rules *next_rules;

    /* published once per loop pass for the heartbeat and the wake-up
     * (fanout_thread_idle) */
    _Atomic int in_flight;
    _Atomic uint64_t done;
    _Atomic uint64_t batches;
    atomic_bool holds_events;
};

static void fanout_thread_requests(void *ud, unsigned bits)
{
    crier_fanout_thread *t = ud;
    if (bits & FANOUT_THREAD_RULES) {
        pthread_mutex_lock(&t->lock);
        crier_rules *rules = t->next_rules;
        t->next_rules = NULL;
        pthread_mutex_unlock(&t->lock);
        if (rules)
            crier_fanout_set_rules(t->fanout, rules);
    }
    if (bits & CRIER_WORKER_STOP) {
        crier_fanout_stop(t->fanout);
        ev_timer_stop(t->loop, &t->poll);
    } else if (bits & CRIER_WORKER_KICK) {
        crier_fanout_kick(t->fanout);
    }
}

static bool fanout_thread_idle(void *ud)
{
    crier_fanout_thread *t = ud;
    atomic_store_explicit(&t->in_flight, crier_fanout_in_flight(t->fanout), memory_order_relaxed);
    atomic_store_explicit(&t->done, crier_fanout_get_stats(t->fanout)->events_done, memory_order_relaxed);
    atomic_store_explicit(&t->batches, crier_fanout_get_stats(t->fanout)->batches, memory_order_relaxed);
    atomic_store_explicit(&t->holds_events, crier_fanout_holds_events(t->fanout), memory_order_relaxed);
    return crier_fanout_idle(t->fanout);
}

void crier_fanout_thread_activity(crier_fanout_thread *t, int *in_flight, uint64_t *done)
{
    *in_flight = atomic_load_explicit(&t->in_flight, memory_order_relaxed);
    *done = atomic_load_explicit(&t->done, memory_order_relaxed);
}

bool crier_fanout_thread_holds_events(crier_fanout_thread *t)
{
    return atomic_load_explicit(&t->holds_events, memory_order_relaxed);
}

uint64_t crier_fanout_thread_batches(crier_fanout_thread *t)
{
    return atomic_load_explicit(&t->batches, memory_order_relaxed);
}

static bool fanout_thread_drained(void *ud)
{
    crier_fanout_thread *t = ud;
    return crier_fanout_between_batches(t->fanout);
}

static void fanout_thread_poll_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_fanout_thread *t = w->data;
    (void)loop;
    (void)revents;
    crier_fanout_kick(t->fanout);
}

/* Frees what lives on the loop (the thread has ended or never started). */
static void fanout_thread_teardown(void *ud, struct ev_loop *loop)
{
    crier_fanout_thread *t = ud;
    ev_timer_stop(loop, &t->poll);
    if (t->fanout)
        t->final_stats = *crier_fanout_get_stats(t->fanout);
    crier_fanout_free(t->fanout);
    crier_pg_free(t->pg);
}

/* Frees what does not live on the loop. */
static void fanout_thread_free(crier_fanout_thread *t)
{
    crier_rules_free(t->next_rules);
    crier_rules_query_free(t->query);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

crier_fanout_thread *crier_fanout_thread_start(const crier_engine_config *cfg, crier_rules *rules, int number,
                                               crier_fanout_committed_fn committed,
                                               const crier_fanout_handoff *handoff, void (*changed)(void *ud),
                                               void *ud, char *err, size_t err_len)
{
    crier_fanout_thread *t = calloc(1, sizeof *t);
    crier_fanout_options opts = cfg->fanout;
    double every = cfg->poll_interval > 0 ? cfg->poll_interval : 1.0;
    char name[24], what[40];

    if (number > 0) {
        snprintf(name, sizeof name, "fanout-%d", number);
        snprintf(what, sizeof what, "fan-out worker %d", number);
    } else {
        snprintf(name, sizeof name, "fanout-slow");
        snprintf(what, sizeof what, "slow fan-out lane");
    }

    if (!t) {
        snprintf(err, err_len, "out of memory");
        crier_rules_free(rules);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    if (cfg->rules_conninfo) {
        t->query = crier_rules_query_new(cfg->rules_conninfo, 0, cfg->rules_query_role);
        if (!t->query) {
            snprintf(err, err_len, "out of memory");
            goto fail;
        }
    }
    crier_rules_set_query(rules, t->query ? crier_rules_query_run : NULL, t->query);
    t->loop = ev_loop_new(EVFLAG_AUTO);
    if (!t->loop) {
        snprintf(err, err_len, "cannot create the loop of the %s", what);
        goto fail;
    }
    t->pg = crier_pg_connect(t->loop, cfg->conninfo, name, err, err_len);
    if (!t->pg)
        goto fail;
    if (number > 0) {
        opts.lane = CRIER_FANOUT_LANE_FAST;
    } else {
        opts.lane = CRIER_FANOUT_LANE_SLOW;
        opts.batch_size = FANOUT_THREAD_BATCH; /* a few events at a time: each may take its full limit */
    }
    t->fanout = crier_fanout_new(t->loop, t->pg, rules, &opts, committed, ud);
    if (!t->fanout) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    rules = NULL; /* the worker's now */
    crier_fanout_set_handoff(t->fanout, handoff);
    ev_timer_init(&t->poll, fanout_thread_poll_cb, every, every);
    t->poll.data = t;
    ev_timer_start(t->loop, &t->poll);
    t->thread = crier_worker_thread_start(t->loop,
                                          &(crier_worker_thread_hooks){.requests = fanout_thread_requests,
                                                                       .idle = fanout_thread_idle,
                                                                       .drained = fanout_thread_drained,
                                                                       .ud = t,
                                                                       .changed = changed,
                                                                       .owner_ud = ud},
                                          what, err, err_len);
    if (!t->thread)
        goto fail;
    crier_worker_thread_request(t->thread, CRIER_WORKER_KICK);
    return t;

fail:
    crier_rules_free(rules);
    if (t->loop) {
        fanout_thread_teardown(t, t->loop);
        ev_loop_destroy(t->loop);
    }
    fanout_thread_free(t);
    return NULL;
}

void crier_fanout_thread_kick(crier_fanout_thread *t)
{
    crier_worker_thread_request(t->thread, CRIER_WORKER_KICK);
}

void crier_fanout_thread_set_rules(crier_fanout_thread *t, crier_rules *rules)
{
    crier_rules_set_query(rules, t->query ? crier_rules_query_run : NULL, t->query);
    pthread_mutex_lock(&t->lock);
    crier_rules_free(t->next_rules); /* never used: a newer one came */
    t->next_rules = rules;
    pthread_mutex_unlock(&t->lock);
    crier_worker_thread_request(t->thread, FANOUT_THREAD_RULES);
}

void crier_fanout_thread_stop(crier_fanout_thread *t)
{
    crier_worker_thread_request(t->thread, CRIER_WORKER_STOP);
}

bool crier_fanout_thread_idle(crier_fanout_thread *t)
{
    return crier_worker_thread_idle(t->thread);
}

bool crier_fanout_thread_finished(crier_fanout_thread *t)
{
    return crier_worker_thread_finished(t->thread);
}

void crier_fanout_thread_join(crier_fanout_thread *t, crier_fanout_stats *stats)
{
    if (!t)
        return;
    crier_worker_thread_join(t->thread, fanout_thread_teardown);
    if (stats)
        crier_fanout_stats_add(stats, &t->final_stats);
    fanout_thread_free(t);
}
