/* timers.c — the timer worker (see timers.h).
 *
 * One pass is one transaction on the worker's connection:
 *   BEGIN
 *   schedules SELECT … FROM crier.fire_schedules(the rules' schedules): due
 *           occurrences emitted — only when the rules declare schedules
 *   fire    SELECT … FROM crier.fire_timers(n): delays fired in place, due digests locked
 *   (digest messages rendered by the rules; their keys computed here, keys.h)
 *   flush   SELECT crier.flush_digests(…) — only when digests came back
 *   COMMIT
 * Between passes: NEXT reads how long until the nearest pending timer or
 * schedule occurrence (crier.schedules_next) and sets the wake-up. */
#include "timers.h"

#include "alloc.h"
#include "clock.h"
#include "keys.h"
#include "log.h"
#include "pg_array.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest sleep without a look at the table (timers created by another
 * process while NOTIFY was lost still fire within this). */
#define TIMERS_MAX_SLEEP 30.0
/* How soon a digest that an item held locked is tried again. */
#define TIMERS_BUSY_RETRY 0.05
/* Wall seconds of digest rendering per pass (on the main loop, beside the
 * fast lane): the digests not rendered by then are left for the next pass,
 * which starts at once. */
#define TIMERS_RENDER_BUDGET 0.5

typedef enum {
    TIMERS_IDLE = 0,
    TIMERS_NEXT,
    TIMERS_BEGIN,
    TIMERS_SCHEDULES,
    TIMERS_FIRE,
    TIMERS_FLUSH,
    TIMERS_COMMIT,
    TIMERS_ROLLBACK
} timers_state;

/* Columns of SQL_FIRE's rows. */
enum {
    FIRE_TIMER_ID,
    FIRE_KIND,
    FIRE_DIGEST_ID,
    FIRE_TENANT,
    FIRE_EVENT_TYPE,
    FIRE_DIGEST_KEY,
    FIRE_RECIPIENT_ID,
    FIRE_CHANNEL,
    FIRE_DISCRIMINATOR,
    FIRE_LAST_EVENT_ID,
    FIRE_OUTCOME,
    FIRE_INPUT
};

/* Parameters of SQL_FLUSH: FLUSH_X is $(FLUSH_X + 1); arrays but the last. */
enum {
    FLUSH_TIMER_ID,
    FLUSH_DIGEST_ID,
    FLUSH_KEY_HASH,
    FLUSH_KEY,
    FLUSH_MESSAGE_ID,
    FLUSH_LAST_EVENT_ID,
    FLUSH_DISCRIMINATOR,
    FLUSH_TARGET,
    FLUSH_BODY,
    FLUSH_SECRET,
    FLUSH_SUBJECT,
    FLUSH_HTML,
    FLUSH_SENDER,
    FLUSH_RETRY,
    FLUSH_ERROR,
    FLUSH_RULES_VERSION, /* text */
    N_FLUSH_PARAMS
};

static const char SQL_NEXT[] =
    "SELECT extract(epoch FROM least((SELECT min(due_at) FROM crier.timers WHERE state = 'pending'),"
    " crier.schedules_next($1::jsonb)) - clock_timestamp())";

/* Columns of SQL_SCHEDULES's rows. */
enum { SCHED_NAME, SCHED_TENANT, SCHED_EMITTED, SCHED_SKIPPED, SCHED_NEXT, SCHED_OUTCOME };

static const char SQL_SCHEDULES[] =
    "SELECT name, tenant, emitted, skipped, next_occurrence, outcome FROM crier.fire_schedules($1::jsonb)";

static const char SQL_FIRE[] =
    "SELECT timer_id, kind, digest_id, tenant, event_type, digest_key, recipient_id, channel, discriminator,"
    " last_event_id, outcome, input FROM crier.fire_timers($1::int)";

static const char SQL_FLUSH[] =
    "SELECT crier.flush_digests($1::bigint[], $2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::bigint[],"
    " $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],"
    " $15::text[], $16)";

struct crier_timers {
    struct ev_loop *loop;
    crier_pg *pg;
    crier_rules *rules;
    crier_rules *next_rules;
    int batch_size;
    crier_timers_committed_fn committed;
    void *committed_ud;

    timers_state state;
    bool kicked;    /* look at the table again */
    bool due;       /* fire a pass */
    bool stopping;
    bool nothing_due; /* the last look found nothing due now */
    ev_timer wake;    /* the nearest due time, or a back-off */

    crier_plan plan;
    crier_pg_array cols[N_FLUSH_PARAMS];
    crier_pg_params params;
    char limit_text[24];
    int pass_rows;
    bool pass_busy;
    bool pass_more;     /* digests were left for the next pass (the render budget) */
    uint64_t pass_sent; /* digests rendered in this pass (sent once it commits) */
    uint64_t pass_delays; /* timers fired in place (delays) in this pass */
    uint64_t pass_due; /* deliveries made due by this pass */
    uint64_t pass_events; /* scheduled events made pending, or emitted by schedules, by this pass */
    uint64_t pass_sched_events; /* of which emitted by schedules */
    int pass_schedules;   /* schedules this pass did something for */
    bool last_pass_empty; /* the last pass found nothing it could take */
    crier_timers_stats stats;
};

static void timers_step(crier_timers *t);
static void timers_result(void *ud, PGresult *res, const char *err);

static void timers_arm(crier_timers *t, double seconds)
{
    ev_timer_stop(t->loop, &t->wake);
    ev_timer_set(&t->wake, seconds < 0 ? 0 : seconds, 0.);
    ev_timer_start(t->loop, &t->wake);
}

static void timers_wake_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_timers *t = w->data;
    (void)loop;
    (void)revents;
    if (!crier_pg_ok(t->pg) && crier_pg_reconnect(t->pg) < 0) {
        timers_arm(t, crier_pg_retry_after(t->pg, 2.0));
        return;
    }
    t->due = true;
    timers_step(t);
}

static void timers_send(crier_timers *t, timers_state next, const char *sql, const crier_pg_params *params)
{
    t->state = next;
    if (crier_pg_query(t->pg, sql, params, timers_result, t) < 0) {
        t->state = TIMERS_IDLE;
        timers_arm(t, 1.0);
    }
}

/* Abandons the pass after a database error: roll back if the connection still
 * works, and try again after a pause. */
static void timers_abort(crier_timers *t, const char *why)
{
    crier_error("timers", "pass abandoned: %s", why);
    if (crier_pg_ok(t->pg) && t->state != TIMERS_ROLLBACK && t->state != TIMERS_IDLE &&
        t->state != TIMERS_NEXT && t->state != TIMERS_BEGIN) {
        timers_send(t, TIMERS_ROLLBACK, "ROLLBACK", NULL);
        return;
    }
    t->state = TIMERS_IDLE;
    timers_arm(t, 1.0);
}

/* Renders one due digest (row i of SQL_FIRE) and adds it to the flush's arrays. */
static void timers_add_digest(crier_timers *t, PGresult *res, int i)
{
    crier_pg_array *c = t->cols;
    char err[2048];
    const char *tenant = PQgetvalue(res, i, FIRE_TENANT);
    crier_key_parts kp = {
        .tenant = tenant,
        .event_type = PQgetvalue(res, i, FIRE_EVENT_TYPE),
        .entity_id = PQgetvalue(res, i, FIRE_DIGEST_KEY),
        .recipient_id = PQgetvalue(res, i, FIRE_RECIPIENT_ID),
        .discriminator = PQgetvalue(res, i, FIRE_DISCRIMINATOR),
    };
    uint8_t h[CRIER_KEY_HASH_LEN];
    char key[2048], message_id[CRIER_KEY_ID_LEN + 1];
    size_t klen;

    crier_pg_array_add_int64(&c[FLUSH_TIMER_ID], strtoll(PQgetvalue(res, i, FIRE_TIMER_ID), NULL, 10));
    crier_pg_array_add_int64(&c[FLUSH_DIGEST_ID], strtoll(PQgetvalue(res, i, FIRE_DIGEST_ID), NULL, 10));
    crier_key_hash(&kp, h);
    klen = crier_key_readable(&kp, key, sizeof key);
    crier_key_hash_id(h, message_id);
    crier_pg_array_add_uuid(&c[FLUSH_KEY_HASH], h);
    crier_pg_array_add_text(&c[FLUSH_KEY], key, klen < sizeof key ? klen : sizeof key - 1);
    crier_pg_array_add_text(&c[FLUSH_MESSAGE_ID], message_id, CRIER_KEY_ID_LEN);
    crier_pg_array_add_int64(&c[FLUSH_LAST_EVENT_ID], strtoll(PQgetvalue(res, i, FIRE_LAST_EVENT_ID), NULL, 10));
    crier_pg_array_add_str(&c[FLUSH_DISCRIMINATOR], kp.discriminator);

    crier_plan_reset(&t->plan);
    crier_plan_status st =
        crier_rules_render_digest(t->rules, PQgetvalue(res, i, FIRE_INPUT), 0, &t->plan, err, sizeof err);
    if (st == CRIER_PLAN_OK && (t->plan.n_recipients != 1 || t->plan.n_deliveries != 1)) {
        snprintf(err, sizeof err, "the digest's rendering planned %zu deliveries instead of one",
                 t->plan.n_deliveries);
        st = CRIER_PLAN_RULE_ERROR;
    }
    if (st != CRIER_PLAN_OK) {
        crier_warn("timers", "digest %s (%s for %s on %s, key %s): %s; it is tried again later",
                   PQgetvalue(res, i, FIRE_DIGEST_ID), kp.event_type, kp.recipient_id,
                   PQgetvalue(res, i, FIRE_CHANNEL), kp.entity_id, err);
        t->stats.render_failures++;
        for (int col = FLUSH_TARGET; col <= FLUSH_RETRY; col++)
            crier_pg_array_add_null(&c[col]);
        crier_pg_array_add_str(&c[FLUSH_ERROR], err);
        return;
    }
    t->pass_sent++;
    const crier_plan_delivery *d = &t->plan.deliveries[0];
    crier_pg_array_add_str(&c[FLUSH_TARGET], d->target);
    crier_pg_array_add_text(&c[FLUSH_BODY], d->body, d->body_len);
    crier_pg_array_add_str(&c[FLUSH_SECRET], d->secret);
    crier_pg_array_add_str(&c[FLUSH_SUBJECT], d->subject);
    crier_pg_array_add_str(&c[FLUSH_HTML], d->html);
    crier_pg_array_add_str(&c[FLUSH_SENDER], d->sender);
    crier_pg_array_add_str(&c[FLUSH_RETRY], d->retry);
    crier_pg_array_add_null(&c[FLUSH_ERROR]);
}

static void timers_on_fire(crier_timers *t, PGresult *res)
{
    static const uint32_t types[N_FLUSH_PARAMS] = {
        [FLUSH_TIMER_ID] = CRIER_PG_INT8,    [FLUSH_DIGEST_ID] = CRIER_PG_INT8, [FLUSH_KEY_HASH] = CRIER_PG_UUID,
        [FLUSH_KEY] = CRIER_PG_TEXT,         [FLUSH_MESSAGE_ID] = CRIER_PG_TEXT,
        [FLUSH_LAST_EVENT_ID] = CRIER_PG_INT8, [FLUSH_DISCRIMINATOR] = CRIER_PG_TEXT,
        [FLUSH_TARGET] = CRIER_PG_TEXT,      [FLUSH_BODY] = CRIER_PG_TEXT,      [FLUSH_SECRET] = CRIER_PG_TEXT,
        [FLUSH_SUBJECT] = CRIER_PG_TEXT,     [FLUSH_HTML] = CRIER_PG_TEXT,      [FLUSH_SENDER] = CRIER_PG_TEXT,
        [FLUSH_RETRY] = CRIER_PG_TEXT,       [FLUSH_ERROR] = CRIER_PG_TEXT,
    };
    int n = PQntuples(res);
    size_t digests = 0;
    double started = crier_clock_s();

    t->pass_rows = n;
    t->pass_busy = false;
    t->pass_more = false;
    t->pass_sent = 0;
    t->pass_delays = 0;
    for (int i = 0; i < N_FLUSH_PARAMS; i++)
        if (types[i])
            crier_pg_array_begin(&t->cols[i], types[i]);
    for (int i = 0; i < n; i++) {
        const char *kind = PQgetvalue(res, i, FIRE_KIND);
        if (!strcmp(kind, "busy")) {
            t->pass_busy = true;
        } else if (!strcmp(kind, "digest")) {
            if (digests > 0 && crier_clock_s() - started > TIMERS_RENDER_BUDGET) {
                t->pass_more = true; /* its timer stays pending: the next pass renders it */
                continue;
            }
            timers_add_digest(t, res, i);
            digests++;
        } else if (!strcmp(kind, "send")) {
            t->pass_delays++;
            if (!strcmp(PQgetvalue(res, i, FIRE_OUTCOME), "pending"))
                t->pass_events++;
            crier_debug("timers", "timer %s (send): %s", PQgetvalue(res, i, FIRE_TIMER_ID),
                        PQgetvalue(res, i, FIRE_OUTCOME));
        } else {
            t->pass_delays++;
            if (!strcmp(PQgetvalue(res, i, FIRE_OUTCOME), "pending"))
                t->pass_due++;
            crier_debug("timers", "timer %s (delay): %s", PQgetvalue(res, i, FIRE_TIMER_ID),
                        PQgetvalue(res, i, FIRE_OUTCOME));
        }
    }
    if (digests == 0) {
        timers_send(t, TIMERS_COMMIT, "COMMIT", NULL);
        return;
    }
    crier_pg_params_reset(&t->params);
    for (int i = 0; i < N_FLUSH_PARAMS; i++) {
        if (i == FLUSH_RULES_VERSION)
            crier_pg_params_text(&t->params, crier_rules_version(t->rules));
        else
            crier_pg_params_array(&t->params, &t->cols[i]);
    }
    timers_send(t, TIMERS_FLUSH, SQL_FLUSH, &t->params);
}

/* Logs what the schedules did and counts the events they emitted. */
static void timers_on_schedules(crier_timers *t, PGresult *res)
{
    int n = PQntuples(res);
    t->pass_schedules = n;
    for (int i = 0; i < n; i++) {
        const char *outcome = PQgetvalue(res, i, SCHED_OUTCOME);
        uint64_t emitted = strtoull(PQgetvalue(res, i, SCHED_EMITTED), NULL, 10);
        const char *next = PQgetisnull(res, i, SCHED_NEXT) ? "none" : PQgetvalue(res, i, SCHED_NEXT);
        t->pass_events += emitted;
        t->pass_sched_events += emitted;
        if (!strncmp(outcome, "failed", 6))
            crier_warn("timers", "schedule %s (tenant %s): %s; tried again in 30 s", PQgetvalue(res, i, SCHED_NAME),
                       PQgetvalue(res, i, SCHED_TENANT), outcome);
        else if (!strcmp(outcome, "fired"))
            crier_info("timers", "schedule %s (tenant %s): %llu event(s) emitted, %s missed occurrence(s) skipped; "
                                 "next %s",
                       PQgetvalue(res, i, SCHED_NAME), PQgetvalue(res, i, SCHED_TENANT),
                       (unsigned long long)emitted, PQgetvalue(res, i, SCHED_SKIPPED), next);
        else
            crier_info("timers", "schedule %s (tenant %s): %s; next %s", PQgetvalue(res, i, SCHED_NAME),
                       PQgetvalue(res, i, SCHED_TENANT), outcome, next);
    }
}

/* Sends the pass's claim of due timers. */
static void timers_send_fire(crier_timers *t)
{
    snprintf(t->limit_text, sizeof t->limit_text, "%d", t->batch_size);
    crier_pg_params_reset(&t->params);
    crier_pg_params_text(&t->params, t->limit_text);
    timers_send(t, TIMERS_FIRE, SQL_FIRE, &t->params);
}

static void timers_on_next(crier_timers *t, PGresult *res)
{
    if (PQntuples(res) == 0 || PQgetisnull(res, 0, 0)) {
        t->nothing_due = true;
        timers_arm(t, TIMERS_MAX_SLEEP);
        return;
    }
    double in = strtod(PQgetvalue(res, 0, 0), NULL);
    t->nothing_due = in > 0;
    if (in <= 0) {
        if (t->last_pass_empty) {
            /* due, but the last pass could take nothing (another daemon
             * holds it): look again a little later, not at once */
            timers_arm(t, TIMERS_BUSY_RETRY);
            return;
        }
        t->due = true;
        return;
    }
    /* a little after the due time: the database's clock decides what is due */
    timers_arm(t, (in > TIMERS_MAX_SLEEP ? TIMERS_MAX_SLEEP : in) + 0.002);
}

static void timers_result(void *ud, PGresult *res, const char *err)
{
    crier_timers *t = ud;
    timers_state was = t->state;

    if (!res) {
        t->state = TIMERS_IDLE;
        timers_abort(t, err);
        return;
    }
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", PQresultErrorMessage(res));
        if (was == TIMERS_ROLLBACK || was == TIMERS_NEXT)
            t->state = TIMERS_IDLE;
        timers_abort(t, msg);
        return;
    }
    switch (was) {
    case TIMERS_NEXT:
        t->state = TIMERS_IDLE;
        timers_on_next(t, res);
        timers_step(t);
        break;
    case TIMERS_BEGIN:
        t->pass_schedules = 0;
        t->pass_events = 0; /* (a pass rolled back counts nothing) */
        t->pass_sched_events = 0;
        if (strcmp(crier_rules_schedules_json(t->rules), "[]")) {
            crier_pg_params_reset(&t->params);
            crier_pg_params_text(&t->params, crier_rules_schedules_json(t->rules));
            timers_send(t, TIMERS_SCHEDULES, SQL_SCHEDULES, &t->params);
        } else {
            timers_send_fire(t);
        }
        break;
    case TIMERS_SCHEDULES:
        timers_on_schedules(t, res);
        timers_send_fire(t);
        break;
    case TIMERS_FIRE:
        timers_on_fire(t, res);
        break;
    case TIMERS_FLUSH:
        t->pass_due += strtoull(PQgetvalue(res, 0, 0), NULL, 10);
        timers_send(t, TIMERS_COMMIT, "COMMIT", NULL);
        break;
    case TIMERS_COMMIT:
        t->state = TIMERS_IDLE;
        if (t->pass_rows > 0 || t->pass_schedules > 0)
            t->stats.passes++;
        t->last_pass_empty = t->pass_rows == 0 && t->pass_schedules == 0;
        t->stats.digests_sent += t->pass_sent;
        t->stats.fired += t->pass_sent + t->pass_delays;
        t->stats.events_released += t->pass_events - t->pass_sched_events;
        t->stats.schedule_events += t->pass_sched_events;
        if ((t->pass_due || t->pass_events) && t->committed)
            t->committed(t->committed_ud, t->pass_due, t->pass_events);
        t->pass_due = 0;
        t->pass_events = 0;
        if (t->pass_rows >= t->batch_size || t->pass_more) {
            t->due = true; /* more may be due at once */
        } else if (t->pass_busy) {
            timers_arm(t, TIMERS_BUSY_RETRY);
        } else {
            t->kicked = true; /* when is the next one due? */
        }
        timers_step(t);
        break;
    case TIMERS_ROLLBACK:
        t->state = TIMERS_IDLE;
        timers_arm(t, 1.0);
        break;
    case TIMERS_IDLE:
        break;
    }
}

/* Starts what is wanted when nothing runs: a pass when due, else a look at
 * the nearest due time when kicked. */
static void timers_step(crier_timers *t)
{
    if (t->state != TIMERS_IDLE || t->stopping)
        return;
    if (t->next_rules) {
        crier_rules_free(t->rules);
        t->rules = t->next_rules;
        t->next_rules = NULL;
        t->kicked = true; /* its schedules may differ */
        t->last_pass_empty = false;
    }
    if (t->due) {
        t->due = false;
        t->kicked = false;
        ev_timer_stop(t->loop, &t->wake);
        timers_send(t, TIMERS_BEGIN, "BEGIN", NULL);
    } else if (t->kicked) {
        t->kicked = false;
        crier_pg_params_reset(&t->params);
        crier_pg_params_text(&t->params, crier_rules_schedules_json(t->rules));
        timers_send(t, TIMERS_NEXT, SQL_NEXT, &t->params);
    }
}

crier_timers *crier_timers_new(struct ev_loop *loop, crier_pg *pg, crier_rules *rules, int batch_size,
                               crier_timers_committed_fn committed, void *ud)
{
    crier_timers *t = crier_xcalloc(1, sizeof *t);
    t->loop = loop;
    t->pg = pg;
    t->rules = rules;
    t->batch_size = batch_size > 0 ? batch_size : CRIER_TIMERS_DEFAULT_BATCH;
    t->committed = committed;
    t->committed_ud = ud;
    ev_timer_init(&t->wake, timers_wake_cb, 1.0, 0.);
    t->wake.data = t;
    return t;
}

void crier_timers_kick(crier_timers *t)
{
    t->kicked = true;
    timers_step(t);
}

void crier_timers_set_rules(crier_timers *t, crier_rules *rules)
{
    crier_rules_free(t->next_rules);
    t->next_rules = rules;
    timers_step(t);
}

bool crier_timers_idle(const crier_timers *t)
{
    return t->state == TIMERS_IDLE && !t->kicked && !t->due && t->nothing_due;
}

bool crier_timers_between_passes(const crier_timers *t)
{
    return t->state == TIMERS_IDLE || t->state == TIMERS_NEXT;
}

void crier_timers_stop(crier_timers *t)
{
    t->stopping = true;
    ev_timer_stop(t->loop, &t->wake);
}

const crier_timers_stats *crier_timers_get_stats(const crier_timers *t)
{
    return &t->stats;
}

void crier_timers_free(crier_timers *t)
{
    if (!t)
        return;
    ev_timer_stop(t->loop, &t->wake);
    crier_rules_free(t->rules);
    crier_rules_free(t->next_rules);
    for (size_t i = 0; i < N_FLUSH_PARAMS; i++)
        crier_pg_array_free(&t->cols[i]);
    crier_plan_free(&t->plan);
    free(t);
}
