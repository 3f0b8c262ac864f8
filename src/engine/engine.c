/* engine.c — wires the loop, connections, workers, wake-ups and signals (see engine.h). */
#include "engine.h"

#include "delivery_thread.h"
#include "fanout_thread.h"
#include "log.h"
#include "rules_query.h"
#include "rules_reload.h"
#include "sd_notify.h"
#include "timers.h"
#include "retention.h"
#include "wake.h"

#include <ev.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const crier_engine_config *cfg;
    struct ev_loop *loop;
    crier_pg *pg_fanout, *pg_listen, *pg_timers, *pg_wake;
    crier_pg *pg_retention;
    crier_retention *retention;      /* deletes finished rows past their period */
    crier_wake *wake;                /* when emits must NOTIFY: while this daemon sleeps */
    uint64_t seen_batches;           /* the fast lane's batches when before_sleep last looked */
    /* the fast lane: n_fanouts workers, each with its own connection and
     * generation (they claim apart: SKIP LOCKED, advisory locks), so that one
     * batch's rules run while another's statements run: the first on this
     * loop, the others each on a thread of its own (fanout_thread.h), so that
     * their rules also run beside each other's */
    crier_fanout *fanout;
    crier_fanout_thread *fast[CRIER_ENGINE_MAX_FANOUTS - 1];
    int n_fanouts; /* 1 + the threads in fast[] */
    int next_kick; /* the fast-lane worker engine_wake_kick looks at first */
    crier_timers *timers;            /* the timer worker, on this loop */
    crier_fanout_thread *slow;       /* the slow lane, on its own thread and loop */
    crier_delivery_thread *delivery; /* the delivery side, on its own thread and loop */
    ev_async delivery_changed;       /* a thread went idle or finished */
    ev_timer poll;
    ev_prepare before_sleep;
    ev_signal sig_term, sig_int, sig_hup;
    ev_timer watchdog; /* the service manager's watchdog pings (notify_service_manager) */
    bool stopping;
    int listened; /* LISTEN statements done on pg_listen since it (re)connected */

    /* Rules reloads: inotify on the rules directory (debounced), SIGHUP. */
    int inotify_fd;
    ev_io inotify_w;
    ev_timer reload_debounce;
    crier_rules_reloader reloader; /* the rules' source, version, counters, last error */
    bool status_dirty, status_error_dirty;
    char worker[300], loaded_at[40], error_at[40], ok_text[16], failed_text[16];
    /* the heartbeat (engine_write_status): every cfg->heartbeat_interval s */
    ev_timer heartbeat;
    time_t started_at;
    double heartbeat_interval;
    bool stopped_written; /* a write saying stopped_at was sent */
    bool final_done;      /* and it completed */
    char started_text[40], interval_text[24], activity_text[4][24];
    crier_pg_params status_params;
    crier_rules_query *query; /* crier.query's read-only connection */
} engine;

/* The heartbeat: this worker's row of crier.rules_status (its rules, what it
 * is doing, when it beat last), and the rows of workers stopped or dead for
 * an hour deleted. */
static const char SQL_STATUS[] =
    "WITH gone AS (DELETE FROM crier.rules_status WHERE worker <> $1"
    "    AND coalesce(stopped_at, heartbeat_at, updated_at) < now() - interval '1 hour'),"
    /* and the metric counters of database backends that are gone folded into
     * shard 0 (sql/022_metrics.sql): the table keeps one shard per live backend */
    " folded AS (DELETE FROM crier.metric_counters c WHERE c.shard <> 0"
    "    AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.shard)"
    "    RETURNING c.metric, c.label1, c.value1, c.label2, c.value2, c.value),"
    " kept AS (INSERT INTO crier.metric_counters AS c (metric, label1, value1, label2, value2, shard, value)"
    "    SELECT metric, label1, value1, label2, value2, 0, sum(value) FROM folded"
    "    GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5"
    "    ON CONFLICT (metric, label1, value1, label2, value2, shard) DO UPDATE SET value = c.value + EXCLUDED.value)"
    " INSERT INTO crier.rules_status AS s (worker, rules_dir, version, loaded_at, reloads_ok, reloads_failed,"
    "    last_error, last_error_at, updated_at, started_at, heartbeat_at, heartbeat_interval, stopped_at,"
    "    events_in_flight, deliveries_in_flight, events_fanned_out, deliveries_claimed)"
    " VALUES ($1, $2, $3, $4::timestamptz, $5::int, $6::int, $7, $8::timestamptz, now(), $9::timestamptz, now(),"
    "    $10::real, CASE WHEN $11::bool THEN now() END, $12::int, $13::int, $14::bigint, $15::bigint)"
    " ON CONFLICT (worker) DO UPDATE SET rules_dir = EXCLUDED.rules_dir, version = EXCLUDED.version,"
    "    loaded_at = EXCLUDED.loaded_at, reloads_ok = EXCLUDED.reloads_ok,"
    "    reloads_failed = EXCLUDED.reloads_failed, last_error = EXCLUDED.last_error,"
    "    last_error_at = EXCLUDED.last_error_at, updated_at = now(), started_at = EXCLUDED.started_at,"
    "    heartbeat_at = now(), heartbeat_interval = EXCLUDED.heartbeat_interval,"
    "    stopped_at = EXCLUDED.stopped_at, events_in_flight = EXCLUDED.events_in_flight,"
    "    deliveries_in_flight = EXCLUDED.deliveries_in_flight,"
    "    events_fanned_out = EXCLUDED.events_fanned_out, deliveries_claimed = EXCLUDED.deliveries_claimed";

/* Formats t as a timestamptz literal in UTC. */
static void engine_time_text(time_t t, char *out, size_t len)
{
    char buf[40];
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S+00", &tm);
    snprintf(out, len, "%s", buf);
}

static void engine_on_status_written(void *ud, PGresult *res, const char *err)
{
    engine *e = ud;
    if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
        const char *msg = res ? PQresultErrorMessage(res) : err;
        bool missing = strstr(msg, "does not exist") != NULL; /* schema not migrated: give up */
        crier_warn("engine", "could not record the rules status in crier.rules_status (%s)%s", msg,
                   missing ? "; run crier migrate" : "; retrying");
        e->status_dirty = !missing;
    }
    if (e->stopped_written)
        e->final_done = true;
}

/* Events the fast lane's workers have finished, all together (crier
 * status, and the awake daemon's measure of load). */
static uint64_t engine_fast_done(void *ud)
{
    const engine *e = ud;
    uint64_t done = crier_fanout_get_stats(e->fanout)->events_done;
    for (int i = 0; i < e->n_fanouts - 1; i++) {
        int n;
        uint64_t d;
        crier_fanout_thread_activity(e->fast[i], &n, &d);
        done += d;
    }
    return done;
}

/* Records what this worker runs and does in crier.rules_status (for crier
 * status, /metrics and /healthz): its rules, its heartbeat, the events and
 * sends it has in flight (the threads' counters are read through atomics),
 * and stopped_at once it stops. Never blocks the loop: skipped while the
 * listen connection is busy (the next poll tries again). */
static void engine_write_status(engine *e)
{
    if (!e->status_dirty || !crier_pg_idle(e->pg_listen))
        return;
    crier_pg_params *p = &e->status_params;
    const crier_rules_reloader *rl = &e->reloader;
    int fast = crier_fanout_in_flight(e->fanout), slow = 0, sending = 0;
    uint64_t done = engine_fast_done(e), slow_done = 0, claimed = 0;
    for (int i = 0; i < e->n_fanouts - 1; i++) {
        int n;
        uint64_t d;
        crier_fanout_thread_activity(e->fast[i], &n, &d);
        fast += n;
    }
    if (e->slow)
        crier_fanout_thread_activity(e->slow, &slow, &slow_done);
    if (e->delivery)
        crier_delivery_thread_activity(e->delivery, &sending, &claimed);
    crier_pg_params_reset(p);
    snprintf(e->ok_text, sizeof e->ok_text, "%d", rl->reloads_ok);
    snprintf(e->failed_text, sizeof e->failed_text, "%d", rl->reloads_failed);
    engine_time_text(rl->loaded_at, e->loaded_at, sizeof e->loaded_at);
    engine_time_text(rl->error_at, e->error_at, sizeof e->error_at);
    engine_time_text(e->started_at, e->started_text, sizeof e->started_text);
    snprintf(e->interval_text, sizeof e->interval_text, "%g", e->heartbeat_interval);
    snprintf(e->activity_text[0], sizeof e->activity_text[0], "%d", fast + slow);
    snprintf(e->activity_text[1], sizeof e->activity_text[1], "%d", sending);
    snprintf(e->activity_text[2], sizeof e->activity_text[2], "%llu", (unsigned long long)(done + slow_done));
    snprintf(e->activity_text[3], sizeof e->activity_text[3], "%llu", (unsigned long long)claimed);
    crier_pg_params_text(p, e->worker);
    crier_pg_params_text(p, e->cfg->rules_dir);
    crier_pg_params_text(p, rl->version);
    crier_pg_params_text(p, e->loaded_at);
    crier_pg_params_text(p, e->ok_text);
    crier_pg_params_text(p, e->failed_text);
    crier_pg_params_text(p, rl->last_error[0] ? rl->last_error : NULL);
    crier_pg_params_text(p, rl->last_error[0] ? e->error_at : NULL);
    crier_pg_params_text(p, e->started_text);
    crier_pg_params_text(p, e->interval_text);
    crier_pg_params_text(p, e->stopping ? "true" : "false");
    for (int i = 0; i < 4; i++)
        crier_pg_params_text(p, e->activity_text[i]);
    if (crier_pg_query(e->pg_listen, SQL_STATUS, p, engine_on_status_written, e) == 0) {
        e->status_dirty = false;
        e->stopped_written = e->stopping;
    }
}

static void engine_tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

/* After the loop ended: says in crier.rules_status that this worker stopped
 * (so that it is not taken for a dead one), waiting at most 2 s for it. */
static void engine_write_final_status(engine *e)
{
    ev_timer tick;
    double until = ev_time() + 2.0;
    e->stopping = true;
    e->status_dirty = true;
    ev_timer_stop(e->loop, &e->heartbeat);
    ev_timer_init(&tick, engine_tick_cb, 0.05, 0.05);
    ev_timer_start(e->loop, &tick);
    while (!e->final_done && ev_time() < until && crier_pg_ok(e->pg_listen)) {
        if (!e->stopped_written) {
            e->status_dirty = true;
            engine_write_status(e);
        }
        ev_run(e->loop, EVRUN_ONCE);
    }
    ev_timer_stop(e->loop, &tick);
}

/* The heartbeat's timer: marks the status to be written now. */
static void engine_heartbeat_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    engine *e = w->data;
    (void)loop;
    (void)revents;
    e->status_dirty = true;
    engine_write_status(e);
}

/* Tells the service manager the state formatted from fmt (sd_notify.h), when
 * serve asked for it; a failed send is logged, never fatal. */
static void engine_notify(engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void engine_notify(engine *e, const char *fmt, ...)
{
    char state[512], err[256];
    va_list ap;
    if (!e->cfg->notify_service_manager)
        return;
    va_start(ap, fmt);
    vsnprintf(state, sizeof state, fmt, ap);
    va_end(ap);
    if (crier_sd_notify(state, err, sizeof err) < 0)
        crier_warn("engine", "%s", err);
}

/* The watchdog's ping: the main loop turns, so the engine is alive. */
static void engine_watchdog_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    engine_notify(w->data, "WATCHDOG=1");
}

static void engine_kick_fanouts(engine *e)
{
    crier_fanout_kick(e->fanout);
    for (int i = 0; i < e->n_fanouts - 1; i++)
        crier_fanout_thread_kick(e->fast[i]);
}

static bool engine_fanouts_idle(const engine *e)
{
    if (!crier_fanout_idle(e->fanout))
        return false;
    for (int i = 0; i < e->n_fanouts - 1; i++)
        if (!crier_fanout_thread_idle(e->fast[i]))
            return false;
    return true;
}

/* While stopping: no fast-lane batch is in flight (the threads' loops have
 * ended, which they do once a stop request finds them between batches). */
static bool engine_fanouts_between_batches(const engine *e)
{
    if (!crier_fanout_between_batches(e->fanout))
        return false;
    for (int i = 0; i < e->n_fanouts - 1; i++)
        if (!crier_fanout_thread_finished(e->fast[i]))
            return false;
    return true;
}

static void engine_kick_all(engine *e)
{
    engine_kick_fanouts(e);
    crier_timers_kick(e->timers);
    crier_fanout_thread_kick(e->slow);
    crier_delivery_thread_kick(e->delivery);
}

/* The awake daemon's probe found events, or a tick came while a batch ran:
 * one fast-lane worker that holds no batch claims (round robin), not all of
 * them. Kicking every worker made each claim split a few events or find none:
 * at 1,000 emits/s, 6,274 claims for 9,834 events, 2,576 of them empty, each
 * a transaction of its own (pgbench -R 1000, pg_stat_statements). A worker
 * whose batch was full claims again by itself; a busy daemon is ticked again
 * within --awake-poll. */
static void engine_wake_kick(void *ud)
{
    engine *e = ud;
    for (int k = 0; k < e->n_fanouts; k++) {
        int i = (e->next_kick + k) % e->n_fanouts;
        bool busy = i == 0 ? crier_fanout_holds_events(e->fanout) : crier_fanout_thread_holds_events(e->fast[i - 1]);
        if (busy)
            continue;
        if (i == 0)
            crier_fanout_kick(e->fanout);
        else
            crier_fanout_thread_kick(e->fast[i - 1]);
        e->next_kick = (i + 1) % e->n_fanouts;
        return;
    }
}

/* No fast-lane batch holds events: the daemon may fall asleep (its last
 * look, after the lock is granted, claims whatever is left). A claim in
 * flight does not count as work: kicked again because one was running at a
 * tick, claims that find nothing would follow each other for as long as
 * each outlasts the tick. */
static bool engine_wake_idle(void *ud)
{
    const engine *e = ud;
    if (crier_fanout_holds_events(e->fanout))
        return false;
    for (int i = 0; i < e->n_fanouts - 1; i++)
        if (crier_fanout_thread_holds_events(e->fast[i]))
            return false;
    return true;
}

/* Batches the fast lane's workers have run, all together. */
static uint64_t engine_fanout_batches(const engine *e)
{
    uint64_t n = crier_fanout_get_stats(e->fanout)->batches;
    for (int i = 0; i < e->n_fanouts - 1; i++)
        n += crier_fanout_thread_batches(e->fast[i]);
    return n;
}

static void engine_on_notify(void *ud, const char *channel, const char *payload)
{
    engine *e = ud;
    (void)payload;
    if (!strcmp(channel, "crier_events")) {
        engine_kick_fanouts(e);
        crier_fanout_thread_kick(e->slow);
    } else if (!strcmp(channel, "crier_timers"))
        crier_timers_kick(e->timers);
    else
        crier_delivery_thread_kick(e->delivery);
}

static void engine_on_listen(void *ud, PGresult *res, const char *err)
{
    engine *e = ud;
    if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
        crier_warn("engine", "LISTEN failed (%s): relying on polling", res ? PQresultErrorMessage(res) : err);
        return;
    }
    /* one statement each: crier_events, crier_deliveries, crier_timers */
    if (e->listened < 3) {
        static const char *const next[] = {NULL, "LISTEN crier_deliveries", "LISTEN crier_timers"};
        if (++e->listened < 3) {
            crier_pg_query(e->pg_listen, next[e->listened], NULL, engine_on_listen, e);
            return;
        }
    }
    engine_write_status(e);
}

/* Subscribes the listen connection to the wake-up channels (one statement each). */
static void engine_listen(engine *e)
{
    e->listened = 0;
    crier_pg_query(e->pg_listen, "LISTEN crier_events", NULL, engine_on_listen, e);
}

static void engine_poll_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    engine *e = w->data;
    (void)loop;
    (void)revents;
    if (!crier_pg_ok(e->pg_listen) && crier_pg_reconnect(e->pg_listen) == 0)
        engine_listen(e);
    crier_wake_poll(e->wake);
    if (!e->stopping)
        engine_kick_all(e);
    engine_write_status(e);
}

/* After a committed batch of either lane (on its thread): new deliveries wake
 * the delivery side, events handed to the slow lane wake it. */
static void engine_on_committed(void *ud, uint64_t deliveries, uint64_t slowed)
{
    engine *e = ud;
    if (deliveries)
        crier_delivery_thread_kick(e->delivery);
    if (slowed)
        crier_fanout_thread_kick(e->slow);
}

/* The fan-out's handoff to the delivery side (fanout.h), called on any
 * fan-out worker's thread. */
static bool engine_handoff_reserve(void *ud, int n)
{
    engine *e = ud;
    return crier_delivery_thread_reserve(e->delivery, n);
}

static void engine_handoff_hand(void *ud, PGresult *rows, int reserved)
{
    engine *e = ud;
    crier_delivery_thread_hand(e->delivery, rows, reserved);
}

/* After a committed pass of the timer worker that made deliveries due or
 * scheduled events pending. */
static void engine_on_timers_committed(void *ud, uint64_t deliveries_due, uint64_t events_due)
{
    engine *e = ud;
    if (deliveries_due)
        crier_delivery_thread_kick(e->delivery);
    if (events_due)
        engine_kick_fanouts(e);
}

/* Called on the delivery thread or the slow lane's: wakes this loop so that
 * before_sleep looks at their state again. */
static void engine_delivery_changed(void *ud)
{
    engine *e = ud;
    ev_async_send(e->loop, &e->delivery_changed);
}

static void engine_delivery_changed_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents; /* before_sleep runs next */
}

/* Runs once per loop pass before the loop blocks: decides whether to stop. */
static void engine_before_sleep_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    engine *e = w->data;
    (void)revents;
    if (engine_fanout_batches(e) != e->seen_batches) {
        /* the fast lane found work since the last pass: stay (or wake) up */
        e->seen_batches = engine_fanout_batches(e);
        crier_wake_busy(e->wake);
    }
    if (e->stopping) {
        if (engine_fanouts_between_batches(e) && crier_timers_between_passes(e->timers) &&
            crier_retention_between_batches(e->retention) &&
            crier_fanout_thread_finished(e->slow) && crier_delivery_thread_finished(e->delivery))
            ev_break(loop, EVBREAK_ALL);
        return;
    }
    if (e->cfg->exit_when_idle && engine_fanouts_idle(e) && crier_timers_idle(e->timers) &&
        crier_fanout_thread_idle(e->slow) && crier_delivery_thread_idle(e->delivery))
        ev_break(loop, EVBREAK_ALL);
}

static void engine_stop(engine *e)
{
    if (e->stopping)
        return;
    e->stopping = true;
    crier_info("engine", "stopping: no new claims; letting in-flight work finish (deadline %.0fs)",
               e->cfg->shutdown_deadline);
    engine_notify(e, "STOPPING=1\nSTATUS=stopping: letting in-flight work finish");
    crier_fanout_stop(e->fanout);
    for (int i = 0; i < e->n_fanouts - 1; i++)
        crier_fanout_thread_stop(e->fast[i]);
    crier_wake_stop(e->wake);
    crier_retention_stop(e->retention);
    crier_timers_stop(e->timers);
    crier_fanout_thread_stop(e->slow);
    crier_delivery_thread_stop(e->delivery);
    ev_timer_stop(e->loop, &e->poll);
}

/* Gives the other fast-lane workers, the slow lane and the timer worker their
 * own generations of the version just loaded (a lua_State serves one worker);
 * when that fails one keeps its old one until the next reload, and says so. */
static void engine_reload_copies(engine *e)
{
    char err[4096];
    crier_rules *copy;
    for (int i = 0; i < e->n_fanouts - 1; i++) {
        copy = crier_rules_reloader_load_copy(&e->reloader, err, sizeof err);
        if (!copy)
            crier_warn("rules", "fan-out worker %d keeps its rules until the next reload: %s", i + 2, err);
        else
            crier_fanout_thread_set_rules(e->fast[i], copy);
    }
    copy = crier_rules_reloader_load_copy(&e->reloader, err, sizeof err);
    if (!copy) {
        crier_warn("rules", "the slow lane keeps its rules until the next reload: %s", err);
    } else {
        crier_fanout_thread_set_rules(e->slow, copy);
    }
    copy = crier_rules_reloader_load_copy(&e->reloader, err, sizeof err);
    if (!copy) {
        crier_warn("rules", "the timer worker keeps its rules until the next reload: %s", err);
        return;
    }
    crier_timers_set_rules(e->timers, copy);
}

/* Loads the rules directory as a new generation (rules_reload.c) and hands it
 * to the fan-out, which swaps it in between batches (in-flight work finishes
 * on the old one). A broken version is rejected and the running one kept; an
 * unchanged one is ignored. */
static void engine_reload(engine *e, const char *why)
{
    const crier_engine_config *cfg = e->cfg;
    crier_rules *rules;
    bool had_error = e->reloader.last_error[0] != '\0';

    engine_notify(e, "RELOADING=1\nSTATUS=reloading the rules (%s)", why);
    switch (crier_rules_reloader_reload(&e->reloader, "the engine", why, &rules)) {
    case CRIER_RELOAD_FAILED:
        e->status_dirty = true;
        engine_notify(e, "READY=1\nSTATUS=running: rules version %.12s (a reload was rejected: see crier status)",
                      e->reloader.version);
        break;
    case CRIER_RELOAD_UNCHANGED:
        e->status_dirty = e->status_dirty || had_error; /* a broken edit was reverted */
        engine_notify(e, "READY=1\nSTATUS=running: rules version %.12s", e->reloader.version);
        break;
    case CRIER_RELOAD_NEW:
        e->status_dirty = true;
        crier_info("rules", "reloaded (%s): version %.12s is used from the next batch", why,
                   e->reloader.version);
        crier_fanout_set_rules(e->fanout, rules);
        engine_reload_copies(e);
        if (cfg->on_rules_reloaded)
            cfg->on_rules_reloaded(cfg->on_rules_reloaded_ud, e->reloader.version);
        engine_notify(e, "READY=1\nSTATUS=running: rules version %.12s", e->reloader.version);
        break;
    }
    engine_write_status(e);
}

static void engine_reload_debounce_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    engine *e = w->data;
    (void)loop;
    (void)revents;
    if (!e->stopping)
        engine_reload(e, "rules directory changed");
}

/* inotify events on the rules directory: a file written and closed, renamed
 * in or out, or deleted. A burst of them (an editor, a deploy) is debounced
 * into one reload. Writing a temporary file and renaming it over a rule file
 * is the safe way to deploy: the reload sees either version, never half. */
static void engine_inotify_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    engine *e = w->data;
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool relevant = false;
    (void)revents;
    for (;;) {
        ssize_t n = read(e->inotify_fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            size_t len = ev->len ? strlen(ev->name) : 0;
            if (ev->mask & (IN_Q_OVERFLOW | IN_DELETE_SELF | IN_MOVE_SELF))
                relevant = true;
            else if (len > 4 && !strcmp(ev->name + len - 4, ".lua") && ev->name[0] != '.')
                relevant = true;
            p += sizeof *ev + ev->len;
        }
    }
    if (relevant) {
        ev_timer_stop(loop, &e->reload_debounce);
        ev_timer_set(&e->reload_debounce, 0.2, 0.);
        ev_timer_start(loop, &e->reload_debounce);
    }
}

static void engine_watch_rules(engine *e)
{
    e->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (e->inotify_fd < 0 ||
        inotify_add_watch(e->inotify_fd, e->cfg->rules_dir,
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF |
                              IN_MOVE_SELF) < 0) {
        crier_warn("engine", "cannot watch %s for changes (%m): reload with SIGHUP", e->cfg->rules_dir);
        if (e->inotify_fd >= 0)
            close(e->inotify_fd);
        e->inotify_fd = -1;
        return;
    }
    ev_io_init(&e->inotify_w, engine_inotify_cb, e->inotify_fd, EV_READ);
    e->inotify_w.data = e;
    ev_io_start(e->loop, &e->inotify_w);
}

static void engine_signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    engine *e = w->data;
    (void)loop;
    (void)revents;
    if (w->signum == SIGHUP)
        engine_reload(e, "SIGHUP");
    else
        engine_stop(e);
}

int crier_engine_run(const crier_engine_config *cfg, crier_engine_stats *stats, char *err, size_t err_len)
{
    engine e;
    crier_rules *rules;
    int rc = -1;

    memset(&e, 0, sizeof e);
    e.cfg = cfg;
    e.inotify_fd = -1;
    e.loop = ev_default_loop(EVFLAG_AUTO);
    if (!e.loop) {
        snprintf(err, err_len, "cannot create the event loop");
        return -1;
    }
    if (cfg->rules_conninfo) {
        e.query = crier_rules_query_new(cfg->rules_conninfo, 0, cfg->rules_query_role);
        if (!e.query) {
            snprintf(err, err_len, "out of memory");
            return -1;
        }
    }
    e.reloader = (crier_rules_reloader){.lua_dir = cfg->lua_dir,
                                        .rules_dir = cfg->rules_dir,
                                        .settings = cfg->settings,
                                        .n_settings = cfg->n_settings,
                                        .query_fn = e.query ? crier_rules_query_run : NULL,
                                        .query_ud = e.query};
    rules = crier_rules_reloader_load(&e.reloader, err, err_len);
    if (!rules) {
        crier_rules_query_free(e.query);
        return -1;
    }
    crier_info("rules", "loaded %s: version %.12s", cfg->rules_dir, e.reloader.version);
    {
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        snprintf(e.worker, sizeof e.worker, "%s:%d", host, (int)getpid());
    }
    e.status_dirty = true;
    e.started_at = time(NULL);
    e.heartbeat_interval = cfg->heartbeat_interval > 0 ? cfg->heartbeat_interval : 5.0;

    e.n_fanouts = cfg->fanout_connections > 0 ? cfg->fanout_connections : CRIER_ENGINE_DEFAULT_FANOUTS;
    if (e.n_fanouts > CRIER_ENGINE_MAX_FANOUTS)
        e.n_fanouts = CRIER_ENGINE_MAX_FANOUTS;
    e.pg_fanout = crier_pg_connect(e.loop, cfg->conninfo, "fanout", err, err_len);
    if (!e.pg_fanout)
        goto out;
    e.pg_listen = crier_pg_connect(e.loop, cfg->conninfo, "listen", err, err_len);
    if (!e.pg_listen)
        goto out;
    crier_pg_on_notify(e.pg_listen, engine_on_notify, &e);

    e.fanout = crier_fanout_new(e.loop, e.pg_fanout, rules, &cfg->fanout, engine_on_committed, &e);
    if (!e.fanout) {
        snprintf(err, err_len, "out of memory");
        goto out;
    }
    rules = NULL; /* owned by the fan-out worker now */
    e.pg_timers = crier_pg_connect(e.loop, cfg->conninfo, "timers", err, err_len);
    if (!e.pg_timers)
        goto out;
    {
        crier_rules *copy = crier_rules_reloader_load_copy(&e.reloader, err, err_len);
        if (!copy)
            goto out;
        e.timers = crier_timers_new(e.loop, e.pg_timers, copy, 0, engine_on_timers_committed, &e);
    }
    ev_async_init(&e.delivery_changed, engine_delivery_changed_cb);
    ev_async_start(e.loop, &e.delivery_changed);
    e.delivery = crier_delivery_thread_start(cfg, engine_delivery_changed, &e, err, err_len);
    if (!e.delivery)
        goto out;
    /* a parked delivery side takes nothing: the deliveries stay for another process */
    crier_fanout_handoff handoff = {.reserve = engine_handoff_reserve,
                                    .hand = engine_handoff_hand,
                                    .lease_seconds = crier_delivery_thread_lease_seconds(e.delivery),
                                    .ud = &e};
    const crier_fanout_handoff *hand_to = cfg->delivery.parked ? NULL : &handoff;
    crier_fanout_set_handoff(e.fanout, hand_to);
    {
        crier_rules *copy = crier_rules_reloader_load_copy(&e.reloader, err, err_len);
        if (!copy)
            goto out;
        e.slow = crier_fanout_thread_start(cfg, copy, 0, engine_on_committed, hand_to, engine_delivery_changed,
                                           &e, err, err_len);
        if (!e.slow)
            goto out;
    }
    /* the fast lane's other workers (after the delivery side and the slow
     * lane, which their batches wake) */
    for (int i = 0; i < e.n_fanouts - 1; i++) {
        crier_rules *copy = crier_rules_reloader_load_copy(&e.reloader, err, err_len);
        if (!copy)
            goto out;
        e.fast[i] = crier_fanout_thread_start(cfg, copy, i + 2, engine_on_committed, hand_to,
                                              engine_delivery_changed, &e, err, err_len);
        if (!e.fast[i])
            goto out;
    }
    /* after the rules' copies are loaded: connecting takes time, and a rules
     * edit meanwhile would make startup fail */
    e.pg_wake = crier_pg_connect(e.loop, cfg->conninfo, "wake", err, err_len);
    if (!e.pg_wake)
        goto out;
    e.wake = crier_wake_new(e.loop, e.pg_wake, &cfg->wake, engine_wake_kick, engine_wake_idle, engine_fast_done, &e);
    if (!e.wake) {
        snprintf(err, err_len, "out of memory");
        goto out;
    }
    e.pg_retention = crier_pg_connect(e.loop, cfg->conninfo, "retention", err, err_len);
    if (!e.pg_retention)
        goto out;
    e.retention = crier_retention_new(e.loop, e.pg_retention, &cfg->retention);
    if (!e.retention) {
        snprintf(err, err_len, "out of memory");
        goto out;
    }

    engine_listen(&e);
    ev_timer_init(&e.poll, engine_poll_cb, 0., cfg->poll_interval > 0 ? cfg->poll_interval : 1.0);
    e.poll.data = &e;
    ev_timer_start(e.loop, &e.poll);
    ev_timer_init(&e.reload_debounce, engine_reload_debounce_cb, 0.2, 0.);
    e.reload_debounce.data = &e;
    if (cfg->watch_rules)
        engine_watch_rules(&e);
    ev_prepare_init(&e.before_sleep, engine_before_sleep_cb);
    e.before_sleep.data = &e;
    ev_prepare_start(e.loop, &e.before_sleep);
    if (cfg->handle_signals) {
        ev_signal_init(&e.sig_term, engine_signal_cb, SIGTERM);
        ev_signal_init(&e.sig_int, engine_signal_cb, SIGINT);
        ev_signal_init(&e.sig_hup, engine_signal_cb, SIGHUP);
        e.sig_term.data = e.sig_int.data = e.sig_hup.data = &e;
        ev_signal_start(e.loop, &e.sig_term);
        ev_signal_start(e.loop, &e.sig_int);
        ev_signal_start(e.loop, &e.sig_hup);
    }
    ev_timer_init(&e.heartbeat, engine_heartbeat_cb, e.heartbeat_interval, e.heartbeat_interval);
    e.heartbeat.data = &e;
    ev_timer_start(e.loop, &e.heartbeat);
    engine_kick_all(&e);
    crier_info("engine", "running (poll every %.1fs)", cfg->poll_interval > 0 ? cfg->poll_interval : 1.0);
    ev_timer_init(&e.watchdog, engine_watchdog_cb, 0., crier_sd_watchdog_timeout() / 2);
    e.watchdog.data = &e;
    if (cfg->notify_service_manager && crier_sd_notify_init()) {
        engine_notify(&e, "READY=1\nSTATUS=running: rules version %.12s", e.reloader.version);
        if (crier_sd_watchdog_timeout() > 0) {
            crier_info("engine", "pinging the service manager's watchdog every %.1fs",
                       crier_sd_watchdog_timeout() / 2);
            ev_timer_start(e.loop, &e.watchdog);
        }
    }
    ev_run(e.loop, 0);
    engine_write_final_status(&e);

    {
        crier_delivery_stats ds;
        crier_fanout_stats all = *crier_fanout_get_stats(e.fanout), *fs = &all;
        for (int i = 0; i < e.n_fanouts - 1; i++) {
            crier_fanout_thread_join(e.fast[i], &all);
            e.fast[i] = NULL;
        }
        crier_fanout_thread_join(e.slow, &all);
        e.slow = NULL;
        crier_delivery_thread_join(e.delivery, &ds);
        e.delivery = NULL;
        if (stats) {
            stats->fanout = *fs;
            stats->delivery = ds;
        }
        crier_info("engine",
                   "stopped: %llu events fanned out (%llu dead), %llu notifications new (%llu by COPY), "
                   "%llu duplicates skipped; %llu delivered, %llu retried, %llu dead; %llu deliveries handed "
                   "to the delivery side by their batch, %llu claimed",
                   (unsigned long long)fs->events_done, (unsigned long long)fs->events_dead,
                   (unsigned long long)fs->notifications_created, (unsigned long long)fs->notifications_copied,
                   (unsigned long long)fs->notifications_duplicate, (unsigned long long)ds.delivered,
                   (unsigned long long)ds.retried, (unsigned long long)ds.dead, (unsigned long long)ds.handed,
                   (unsigned long long)(ds.claimed - ds.handed));
    }
    rc = 0;

out:
    if (cfg->handle_signals) {
        ev_signal_stop(e.loop, &e.sig_term);
        ev_signal_stop(e.loop, &e.sig_int);
        ev_signal_stop(e.loop, &e.sig_hup);
    }
    ev_timer_stop(e.loop, &e.poll);
    ev_timer_stop(e.loop, &e.watchdog);
    ev_timer_stop(e.loop, &e.heartbeat);
    ev_async_stop(e.loop, &e.delivery_changed);
    ev_timer_stop(e.loop, &e.reload_debounce);
    if (e.inotify_fd >= 0) {
        ev_io_stop(e.loop, &e.inotify_w);
        close(e.inotify_fd);
    }
    ev_prepare_stop(e.loop, &e.before_sleep);
    for (int i = 0; i < CRIER_ENGINE_MAX_FANOUTS - 1; i++)
        crier_fanout_thread_join(e.fast[i], NULL);
    crier_fanout_thread_join(e.slow, NULL);
    /* before the delivery side: a batch cut short gives its handoff back */
    crier_fanout_free(e.fanout);
    crier_delivery_thread_join(e.delivery, NULL);
    crier_wake_free(e.wake);
    crier_retention_free(e.retention);
    crier_timers_free(e.timers);
    crier_rules_free(rules);
    crier_pg_free(e.pg_listen);
    crier_pg_free(e.pg_fanout);
    crier_pg_free(e.pg_timers);
    crier_pg_free(e.pg_wake);
    crier_pg_free(e.pg_retention);
    crier_rules_query_free(e.query);
    return rc;
}
