/* wake.c — the daemon's sleep announcement and its cheap probe while awake (see wake.h).
 *
 *   AWAKE ──(idle for sleep_after)──> ACQUIRING ──(lock granted)──> ASLEEP
 *     ^                                  │ busy: release once granted   │ busy
 *     └──────────── RELEASING <──────────┴──────────────────────────────┘
 *
 * ACQUIRING waits (nonblocking, on this module's connection) for the emitters
 * that hold the lock shared; meanwhile new emitters already notify, since a
 * waiting exclusive request makes their try-lock fail. */
#include "wake.h"

#include "clock.h"
#include "log.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAKE_STR2(x) #x
#define WAKE_STR(x) WAKE_STR2(x)
#define WAKE_KEY WAKE_STR(CRIER_WAKE_LOCK_CLASS) ", " WAKE_STR(CRIER_WAKE_LOCK_OBJECT)

static const char SQL_SLEEP[] = "SELECT pg_advisory_lock(" WAKE_KEY ")";
static const char SQL_WAKE[] = "SELECT pg_advisory_unlock(" WAKE_KEY ")";
/* The fast lane's claim (fanout.c) would find something (sql/functions/events_waiting.sql). */
static const char SQL_PROBE[] = "SELECT crier.events_waiting(0::smallint)";

struct crier_wake {
    struct ev_loop *loop;
    crier_pg *pg;
    crier_wake_options opts;
    crier_wake_kick_fn kick;
    crier_wake_idle_fn idle;
    crier_wake_done_fn done;
    void *ud;

    crier_wake_state state;
    bool probing;      /* SQL_PROBE in flight (AWAKE only) */
    bool wake_wanted;  /* busy while ACQUIRING: release as soon as granted */
    bool stopping;
    double last_busy;  /* monotonic seconds */
    uint64_t sleeps;
    ev_timer tick;     /* every awake_poll (or linger, under load) while AWAKE */
    bool lingering;    /* under load: the tick comes every linger seconds */
    double rate_at;    /* monotonic seconds of the last rate sample */
    uint64_t rate_done; /* w->done() then */
};

#define WAKE_RATE_WINDOW 0.1 /* seconds over which the fast lane's rate is measured */

static void wake_set_lingering(crier_wake *w, bool on)
{
    if (w->lingering == on)
        return;
    w->lingering = on;
    w->tick.repeat = on ? w->opts.linger : w->opts.awake_poll;
    crier_debug("wake", on ? "under load: claiming every %.0f ms, no probes" : "load gone: probing every %.0f ms",
                w->tick.repeat * 1000);
}

bool crier_wake_under_load(bool lingering, double rate, double linger_rate)
{
    return rate >= (lingering ? linger_rate / 2 : linger_rate);
}

/* Every WAKE_RATE_WINDOW: the fast lane's rate decides the tick's interval. */
static void wake_sample_rate(crier_wake *w, double now)
{
    if (w->opts.linger <= 0 || now - w->rate_at < WAKE_RATE_WINDOW)
        return;
    uint64_t done = w->done(w->ud);
    wake_set_lingering(w, crier_wake_under_load(w->lingering, (double)(done - w->rate_done) / (now - w->rate_at),
                                                w->opts.linger_rate));
    w->rate_done = done;
    w->rate_at = now;
}

static void wake_tick_start(crier_wake *w)
{
    if (!w->stopping && !ev_is_active(&w->tick))
        ev_timer_again(w->loop, &w->tick);
}

static void wake_on_result(void *ud, PGresult *res, const char *err);

/* Sends SQL_WAKE (the daemon is asleep and has work). */
static void wake_release(crier_wake *w)
{
    w->wake_wanted = false;
    w->state = CRIER_WAKE_RELEASING;
    if (crier_pg_query(w->pg, SQL_WAKE, NULL, wake_on_result, w) < 0) {
        /* a broken connection took its lock with it */
        w->state = CRIER_WAKE_AWAKE;
        wake_tick_start(w);
    }
}

static void wake_on_probe(void *ud, PGresult *res, const char *err)
{
    crier_wake *w = ud;
    (void)err;
    w->probing = false;
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't')
        w->kick(w->ud);
}

static void wake_on_result(void *ud, PGresult *res, const char *err)
{
    crier_wake *w = ud;
    bool ok = res && PQresultStatus(res) == PGRES_TUPLES_OK;

    switch (w->state) {
    case CRIER_WAKE_ACQUIRING:
        if (!ok) {
            crier_warn("wake", "cannot announce that the daemon sleeps (%s): emits will not wake it, "
                               "polling instead",
                       res ? PQresultErrorMessage(res) : err);
            w->state = CRIER_WAKE_AWAKE;
            w->last_busy = crier_clock_s(); /* try again after sleep_after */
            wake_tick_start(w);
            return;
        }
        w->state = CRIER_WAKE_ASLEEP;
        w->sleeps++;
        crier_debug("wake", "asleep: emits notify");
        if (w->wake_wanted || w->stopping) {
            wake_release(w);
            return;
        }
        /* the last look: every emitter that saw the daemon awake has committed
         * or rolled back by now (each held the lock shared until it ended) */
        w->kick(w->ud);
        return;
    case CRIER_WAKE_RELEASING:
        if (!ok)
            crier_warn("wake", "releasing the sleep lock failed (%s)", res ? PQresultErrorMessage(res) : err);
        w->state = CRIER_WAKE_AWAKE;
        crier_debug("wake", "awake: emits do not notify");
        wake_tick_start(w);
        return;
    case CRIER_WAKE_AWAKE:
    case CRIER_WAKE_ASLEEP:
        return;
    }
}

static void wake_tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    crier_wake *w = t->data;
    (void)revents;
    if (w->state != CRIER_WAKE_AWAKE || w->stopping) {
        ev_timer_stop(loop, t);
        return;
    }
    double now = crier_clock_s();
    wake_sample_rate(w, now);
    if (!crier_pg_ok(w->pg) || w->probing)
        return;
    if (!w->idle(w->ud)) {
        /* a batch runs: a worker without one claims now, no probe needed (the
         * engine kicks one; a worker whose batch was full goes on by itself) */
        w->kick(w->ud);
        return;
    }
    if (now - w->last_busy >= w->opts.sleep_after) {
        ev_timer_stop(loop, t);
        wake_set_lingering(w, false);
        w->state = CRIER_WAKE_ACQUIRING;
        if (crier_pg_query(w->pg, SQL_SLEEP, NULL, wake_on_result, w) < 0) {
            w->state = CRIER_WAKE_AWAKE;
            w->last_busy = crier_clock_s();
            wake_tick_start(w);
        }
        return;
    }
    if (w->lingering) {
        /* under load the claim is the probe: a probe that found events would be
         * followed by that claim anyway (a probe cost 0.9 ms beside 16 emitters,
         * walking the pending index's not yet pruned entries); an empty claim
         * lowers the rate, and below linger_rate the probes come back */
        w->kick(w->ud);
        return;
    }
    if (crier_pg_query_prepared(w->pg, "crier_wake_probe", SQL_PROBE, NULL, wake_on_probe, w) == 0)
        w->probing = true;
}

crier_wake *crier_wake_new(struct ev_loop *loop, crier_pg *pg, const crier_wake_options *opts,
                           crier_wake_kick_fn kick, crier_wake_idle_fn idle, crier_wake_done_fn done,
                           void *ud)
{
    crier_wake *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->loop = loop;
    w->pg = pg;
    w->opts.awake_poll = opts && opts->awake_poll > 0 ? opts->awake_poll : 0.002;
    w->opts.sleep_after = opts && opts->sleep_after > 0 ? opts->sleep_after : 0.1;
    w->opts.linger = !opts || opts->linger == 0 ? 0.025 : opts->linger;
    w->opts.linger_rate = opts && opts->linger_rate > 0 ? opts->linger_rate : CRIER_WAKE_LINGER_RATE;
    w->kick = kick;
    w->idle = idle;
    w->done = done;
    w->rate_at = crier_clock_s();
    w->rate_done = done(ud);
    w->ud = ud;
    w->last_busy = crier_clock_s();
    ev_init(&w->tick, wake_tick_cb);
    w->tick.repeat = w->opts.awake_poll;
    w->tick.data = w;
    wake_tick_start(w);
    return w;
}

void crier_wake_busy(crier_wake *w)
{
    w->last_busy = crier_clock_s();
    switch (w->state) {
    case CRIER_WAKE_ASLEEP:
        wake_release(w);
        break;
    case CRIER_WAKE_ACQUIRING:
        w->wake_wanted = true;
        break;
    case CRIER_WAKE_AWAKE:
        wake_tick_start(w);
        break;
    case CRIER_WAKE_RELEASING:
        break;
    }
}

void crier_wake_poll(crier_wake *w)
{
    if (w->stopping || crier_pg_ok(w->pg))
        return;
    if (crier_pg_reconnect(w->pg) == 0) {
        /* the old session's lock went with it */
        w->state = CRIER_WAKE_AWAKE;
        w->probing = false;
        w->last_busy = crier_clock_s();
        wake_tick_start(w);
    }
}

crier_wake_state crier_wake_get_state(const crier_wake *w)
{
    return w->state;
}

uint64_t crier_wake_sleeps(const crier_wake *w)
{
    return w->sleeps;
}

void crier_wake_stop(crier_wake *w)
{
    w->stopping = true;
    ev_timer_stop(w->loop, &w->tick);
}

void crier_wake_free(crier_wake *w)
{
    if (!w)
        return;
    ev_timer_stop(w->loop, &w->tick);
    free(w);
}
