/* retention.c — the retention worker: one pass every interval visits each kind
 * and deletes its expired rows batch by batch (see retention.h). */
#include "retention.h"

#include "log.h"

#include <ev.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* A pass stops deleting one kind after this many full batches (the rest
 * waits for the next pass), so one kind's backlog cannot starve the others. */
#define RETENTION_MAX_BATCHES 200
#define RETENTION_DEFAULT_PERIOD (7 * 86400.0)

/* One batch, walking the kind's ids upwards from the last batch's (see
 * sql/functions/retain.sql: a walk from the lowest id steps over every row the
 * earlier batches deleted until vacuum removes them). */
static const char SQL_RETAIN[] =
    "SELECT deleted, last_id FROM crier.retain($1, make_interval(secs => $2::float8), $3::int, $4::bigint)";

/* After a kind's walk: one window of the rows it does not walk to (see
 * sql/functions/retain_sweep.sql), from where the last pass's sweep stopped. */
static const char SQL_SWEEP[] =
    "SELECT deleted, next_after FROM crier.retain_sweep($1, make_interval(secs => $2::float8), $3::int, $4::bigint)";

static const char *const kind_names[CRIER_RETAIN_KINDS] = {
    [CRIER_RETAIN_EVENTS] = "events",   [CRIER_RETAIN_DELIVERIES] = "deliveries",
    [CRIER_RETAIN_TIMERS] = "timers",   [CRIER_RETAIN_DIGESTS] = "digests",
    [CRIER_RETAIN_THROTTLE_HITS] = "throttle_hits",
};

struct crier_retention {
    struct ev_loop *loop;
    crier_pg *pg;
    crier_retention_options opts;
    ev_timer next;
    bool running;  /* a pass is under way */
    bool in_flight;
    bool stopping;
    int kind;      /* the kind being deleted */
    int batches;   /* full batches of that kind in this pass */
    long long after; /* the cursor: the highest id the last batch of that kind looked at */
    bool sweeping;   /* the batch in flight is the kind's sweep */
    long long sweep_after[CRIER_RETAIN_KINDS]; /* where each kind's sweep goes on (0: from the start) */
    uint64_t pass_deleted[CRIER_RETAIN_KINDS];
    crier_pg_params params;
    char period_text[32], batch_text[16], after_text[24];
    crier_retention_stats stats;
};

const char *crier_retention_kind_name(crier_retain_kind kind)
{
    return kind >= 0 && kind < CRIER_RETAIN_KINDS ? kind_names[kind] : "?";
}

static void retention_step(crier_retention *r);

/* The kinds whose walk ends where rows were created after the cutoff
 * (crier.retain_id_limit), and which a sweep completes. */
static bool retention_sweeps(int kind)
{
    return kind == CRIER_RETAIN_EVENTS || kind == CRIER_RETAIN_DELIVERIES || kind == CRIER_RETAIN_TIMERS;
}

static void retention_end_pass(crier_retention *r)
{
    uint64_t total = 0;
    r->running = false;
    r->stats.passes++;
    for (int k = 0; k < CRIER_RETAIN_KINDS; k++)
        total += r->pass_deleted[k];
    if (total > 0)
        crier_info("retention", "deleted %llu events, %llu deliveries (with their attempts), %llu timers, "
                                "%llu digests, %llu throttle hits past their retention",
                   (unsigned long long)r->pass_deleted[CRIER_RETAIN_EVENTS],
                   (unsigned long long)r->pass_deleted[CRIER_RETAIN_DELIVERIES],
                   (unsigned long long)r->pass_deleted[CRIER_RETAIN_TIMERS],
                   (unsigned long long)r->pass_deleted[CRIER_RETAIN_DIGESTS],
                   (unsigned long long)r->pass_deleted[CRIER_RETAIN_THROTTLE_HITS]);
    if (!r->stopping) {
        ev_timer_set(&r->next, r->opts.interval, 0.);
        ev_timer_start(r->loop, &r->next);
    }
}

static void retention_on_result(void *ud, PGresult *res, const char *err)
{
    crier_retention *r = ud;
    long n = 0;
    r->in_flight = false;
    if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
        crier_warn("retention", "deleting expired %s failed (%s); trying again next pass",
                   kind_names[r->kind], res ? PQresultErrorMessage(res) : err);
    } else {
        n = strtol(PQgetvalue(res, 0, 0), NULL, 10);
        if (r->sweeping)
            r->sweep_after[r->kind] = PQgetisnull(res, 0, 1) ? 0 : strtoll(PQgetvalue(res, 0, 1), NULL, 10);
        else if (!PQgetisnull(res, 0, 1))
            r->after = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
        r->pass_deleted[r->kind] += (uint64_t)n;
        r->stats.deleted[r->kind] += (uint64_t)n;
    }
    if (!r->sweeping && n >= r->opts.batch && ++r->batches < RETENTION_MAX_BATCHES && !r->stopping) {
        retention_step(r); /* a full batch: there may be more of this kind */
        return;
    }
    if (!r->sweeping && retention_sweeps(r->kind) && !r->stopping) {
        r->sweeping = true; /* the walk of this kind is over: its sweep */
        retention_step(r);
        return;
    }
    r->sweeping = false;
    r->kind++;
    r->batches = 0;
    r->after = 0;
    retention_step(r);
}

/* Sends the next batch of the pass, or ends it. */
static void retention_step(crier_retention *r)
{
    while (r->kind < CRIER_RETAIN_KINDS && r->opts.period[r->kind] < 0)
        r->kind++;
    if (r->kind >= CRIER_RETAIN_KINDS || r->stopping) {
        retention_end_pass(r);
        return;
    }
    snprintf(r->period_text, sizeof r->period_text, "%.3f", r->opts.period[r->kind]);
    snprintf(r->batch_text, sizeof r->batch_text, "%d", r->opts.batch);
    crier_pg_params_reset(&r->params);
    crier_pg_params_text(&r->params, kind_names[r->kind]);
    crier_pg_params_text(&r->params, r->period_text);
    crier_pg_params_text(&r->params, r->batch_text);
    snprintf(r->after_text, sizeof r->after_text, "%lld", r->sweeping ? r->sweep_after[r->kind] : r->after);
    crier_pg_params_text(&r->params, r->after_text);
    if (!crier_pg_ok(r->pg) && crier_pg_reconnect(r->pg) < 0) {
        retention_end_pass(r);
        return;
    }
    if (crier_pg_query(r->pg, r->sweeping ? SQL_SWEEP : SQL_RETAIN, &r->params, retention_on_result, r) < 0) {
        retention_end_pass(r);
        return;
    }
    r->in_flight = true;
}

static void retention_next_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    crier_retention_kick(w->data);
}

crier_retention *crier_retention_new(struct ev_loop *loop, crier_pg *pg, const crier_retention_options *opts)
{
    crier_retention *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->loop = loop;
    r->pg = pg;
    if (opts)
        r->opts = *opts;
    for (int k = 0; k < CRIER_RETAIN_KINDS; k++)
        if (r->opts.period[k] == 0)
            r->opts.period[k] = RETENTION_DEFAULT_PERIOD;
    if (r->opts.interval <= 0)
        r->opts.interval = 60;
    if (r->opts.batch <= 0)
        r->opts.batch = 1000;
    ev_timer_init(&r->next, retention_next_cb, r->opts.interval < 5 ? r->opts.interval : 5, 0.);
    r->next.data = r;
    ev_timer_start(loop, &r->next);
    return r;
}

void crier_retention_kick(crier_retention *r)
{
    if (r->running || r->stopping)
        return;
    ev_timer_stop(r->loop, &r->next);
    r->running = true;
    r->kind = 0;
    r->batches = 0;
    r->after = 0;
    r->sweeping = false;
    for (int k = 0; k < CRIER_RETAIN_KINDS; k++)
        r->pass_deleted[k] = 0;
    retention_step(r);
}

void crier_retention_stop(crier_retention *r)
{
    r->stopping = true;
    ev_timer_stop(r->loop, &r->next);
}

bool crier_retention_between_batches(const crier_retention *r)
{
    return !r->in_flight;
}

const crier_retention_stats *crier_retention_get_stats(const crier_retention *r)
{
    return &r->stats;
}

void crier_retention_free(crier_retention *r)
{
    if (!r)
        return;
    ev_timer_stop(r->loop, &r->next);
    free(r);
}
