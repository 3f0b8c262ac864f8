/* delivery.c — lease-based delivery claims and batched result writes (see delivery.h).
 *
 * Claim (one autocommit statement): due rows (pending with due_at passed, or
 * sending with an expired lease) become 'sending' with due_at = now() + lease and
 * attempts + 1. The attempt number is the fencing token: a result is written only
 * if the row still carries the attempt this worker claimed, so a worker whose
 * lease expired and was reclaimed cannot overwrite the newer claim's outcome. */
#include "delivery.h"

#include "log.h"
#include "pg_array.h"
#include "strbuf.h"

#include <ev.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { DELIVERY_IDLE = 0, DELIVERY_CLAIMING, DELIVERY_WRITING } delivery_state;

typedef struct {
    int64_t id;
    int attempt;
    const char *state; /* "delivered", "pending" (retry), "dead" */
    long status;
    size_t error;      /* offset in errors, or SIZE_MAX */
    double delay_s;
} delivery_result;

struct crier_delivery {
    struct ev_loop *loop;
    crier_pg *pg;
    crier_webhook_sender *sender;
    crier_delivery_options opts;
    delivery_state state;
    bool want_claim;
    bool stopping;
    bool last_empty;
    int inflight;
    ev_timer retry;

    /* Attempt numbers of sends in flight, by delivery id (small linear map). */
    struct {
        int64_t id;
        int attempt;
    } *flying;
    size_t n_flying, cap_flying;

    delivery_result *results;
    size_t n_results, cap_results;
    crier_strbuf errors;
    size_t writing; /* results in the statement in flight */

    crier_pg_array cols[6];
    crier_pg_params params;
    char limit_text[24], lease_text[24];
    crier_delivery_stats stats;
};

static const char SQL_CLAIM[] =
    "UPDATE crier.deliveries AS d SET state = 'sending', attempts = d.attempts + 1,"
    "    due_at = now() + make_interval(secs => $2::int)"
    " FROM (SELECT id FROM crier.deliveries"
    "       WHERE state IN ('pending', 'sending') AND due_at <= now()"
    "       ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED) AS c"
    " WHERE d.id = c.id"
    " RETURNING d.id, d.attempts, d.channel, d.message_id, d.target, d.body, d.secret";

static const char SQL_RESULTS[] =
    "UPDATE crier.deliveries AS d SET state = r.state, last_status = r.status, last_error = r.error,"
    "    due_at = now() + make_interval(secs => r.delay),"
    "    delivered_at = CASE WHEN r.state = 'delivered' THEN now() END"
    " FROM unnest($1::bigint[], $2::int[], $3::text[], $4::int[], $5::text[], $6::float8[])"
    "     AS r(id, attempt, state, status, error, delay)"
    " WHERE d.id = r.id AND d.attempts = r.attempt AND d.state = 'sending'";

static void delivery_pump(crier_delivery *d);

static void delivery_retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_delivery *d = w->data;
    (void)loop;
    (void)revents;
    if (!crier_pg_ok(d->pg) && crier_pg_reconnect(d->pg) < 0) {
        ev_timer_set(&d->retry, 2.0, 0.);
        ev_timer_start(d->loop, &d->retry);
        return;
    }
    d->want_claim = true;
    delivery_pump(d);
}

static void delivery_pause(crier_delivery *d)
{
    d->state = DELIVERY_IDLE;
    if (!ev_is_active(&d->retry)) {
        ev_timer_set(&d->retry, 1.0, 0.);
        ev_timer_start(d->loop, &d->retry);
    }
}

/* Exponential backoff with full jitter: a uniform delay in [0, min(cap, base*2^n)]. */
static double delivery_backoff(int attempt)
{
    double ceiling = 5.0 * pow(2.0, attempt - 1);
    if (ceiling > 3600.0)
        ceiling = 3600.0;
    return ceiling * ((double)random() / (double)RAND_MAX);
}

static void delivery_flying_add(crier_delivery *d, int64_t id, int attempt)
{
    if (d->n_flying == d->cap_flying) {
        size_t cap = d->cap_flying ? d->cap_flying * 2 : 64;
        void *p = realloc(d->flying, cap * sizeof *d->flying);
        if (!p)
            abort();
        d->flying = p;
        d->cap_flying = cap;
    }
    d->flying[d->n_flying].id = id;
    d->flying[d->n_flying].attempt = attempt;
    d->n_flying++;
}

static int delivery_flying_take(crier_delivery *d, int64_t id)
{
    for (size_t i = 0; i < d->n_flying; i++) {
        if (d->flying[i].id == id) {
            int attempt = d->flying[i].attempt;
            d->flying[i] = d->flying[--d->n_flying];
            return attempt;
        }
    }
    return -1;
}

static void delivery_add_result(crier_delivery *d, int64_t id, int attempt, const char *state, long status,
                                const char *error, double delay_s)
{
    if (d->n_results == d->cap_results) {
        size_t cap = d->cap_results ? d->cap_results * 2 : 64;
        delivery_result *p = realloc(d->results, cap * sizeof *p);
        if (!p)
            abort();
        d->results = p;
        d->cap_results = cap;
    }
    delivery_result *r = &d->results[d->n_results++];
    r->id = id;
    r->attempt = attempt;
    r->state = state;
    r->status = status;
    r->error = error ? crier_strbuf_add(&d->errors, error, strlen(error)) : SIZE_MAX;
    r->delay_s = delay_s;
}

void crier_delivery_on_webhook_done(void *ud, const crier_webhook_result *res)
{
    crier_delivery *d = ud;
    int attempt = delivery_flying_take(d, res->delivery_id);
    char error[600];
    const char *state;
    double delay = 0;

    d->inflight--;
    if (attempt < 0) {
        crier_error("delivery", "result for unknown delivery %lld", (long long)res->delivery_id);
        delivery_pump(d);
        return;
    }
    if (!res->error && res->http_status >= 200 && res->http_status < 300) {
        state = "delivered";
        error[0] = '\0';
        d->stats.delivered++;
    } else {
        bool permanent = !res->error && res->http_status >= 400 && res->http_status < 500 &&
                         res->http_status != 408 && res->http_status != 429;
        if (res->error)
            snprintf(error, sizeof error, "%s", res->error);
        else
            snprintf(error, sizeof error, "HTTP %ld: %.500s", res->http_status,
                     res->response_excerpt ? res->response_excerpt : "");
        if (permanent || attempt >= d->opts.max_attempts) {
            state = "dead";
            d->stats.dead++;
        } else {
            state = "pending";
            delay = res->retry_after_s >= 0 ? (double)res->retry_after_s : delivery_backoff(attempt);
            d->stats.retried++;
        }
    }
    delivery_add_result(d, res->delivery_id, attempt, state, res->http_status, error[0] ? error : NULL,
                        delay);
    delivery_pump(d);
}

static void delivery_on_claim(crier_delivery *d, PGresult *res)
{
    int n = PQntuples(res);

    d->last_empty = n == 0;
    if (n >= d->opts.batch_size)
        d->want_claim = true;
    d->stats.claimed += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        int64_t id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        int attempt = atoi(PQgetvalue(res, i, 1));
        const char *channel = PQgetvalue(res, i, 2);
        if (strcmp(channel, "webhook") != 0) {
            delivery_add_result(d, id, attempt, "dead", 0, "unknown channel: no sender for it in this build",
                                0);
            continue;
        }
        crier_webhook_request req = {
            .delivery_id = id,
            .url = PQgetvalue(res, i, 4),
            .body = PQgetvalue(res, i, 5),
            .body_len = (size_t)PQgetlength(res, i, 5),
            .webhook_id = PQgetvalue(res, i, 3),
            .secret = PQgetisnull(res, i, 6) ? NULL : PQgetvalue(res, i, 6),
            .timestamp = 0,
        };
        if (crier_webhook_send(d->sender, &req) < 0) {
            /* Refused before any byte left: not an attempt that counts against
             * the receiver, but the row must not stay leased forever. */
            delivery_add_result(d, id, attempt, attempt >= d->opts.max_attempts ? "dead" : "pending", 0,
                                "the webhook request was refused before sending (bad URL or header value)",
                                delivery_backoff(attempt));
            continue;
        }
        delivery_flying_add(d, id, attempt);
        d->inflight++;
    }
}

static void delivery_result_cb(void *ud, PGresult *res, const char *err)
{
    crier_delivery *d = ud;
    delivery_state was = d->state;

    d->state = DELIVERY_IDLE;
    if (!res || (PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK)) {
        crier_error("delivery", "%s failed: %s", was == DELIVERY_CLAIMING ? "claim" : "result write",
                    res ? PQresultErrorMessage(res) : err);
        /* Unwritten results stay queued; claimed rows come back when their lease ends. */
        delivery_pause(d);
        return;
    }
    if (was == DELIVERY_CLAIMING) {
        delivery_on_claim(d, res);
    } else if (was == DELIVERY_WRITING) {
        /* Drop the written results, keep any that arrived meanwhile. */
        memmove(d->results, d->results + d->writing, (d->n_results - d->writing) * sizeof *d->results);
        d->n_results -= d->writing;
        d->writing = 0;
        d->want_claim = true; /* room was made: more may be due */
        if (d->n_results == 0)
            crier_strbuf_reset(&d->errors);
    }
    delivery_pump(d);
}

static void delivery_write_results(crier_delivery *d)
{
    static const uint32_t types[6] = {CRIER_PG_INT8, CRIER_PG_INT4, CRIER_PG_TEXT,
                                      CRIER_PG_INT4, CRIER_PG_TEXT, CRIER_PG_FLOAT8};
    crier_pg_array *c = d->cols;
    for (int i = 0; i < 6; i++)
        crier_pg_array_begin(&c[i], types[i]);
    for (size_t i = 0; i < d->n_results; i++) {
        const delivery_result *r = &d->results[i];
        crier_pg_array_add_int64(&c[0], r->id);
        crier_pg_array_add_int32(&c[1], r->attempt);
        crier_pg_array_add_str(&c[2], r->state);
        if (r->status > 0)
            crier_pg_array_add_int32(&c[3], (int32_t)r->status);
        else
            crier_pg_array_add_null(&c[3]);
        crier_pg_array_add_str(&c[4], r->error == SIZE_MAX ? NULL : crier_strbuf_at(&d->errors, r->error));
        crier_pg_array_add_double(&c[5], r->delay_s);
    }
    crier_pg_params_reset(&d->params);
    for (int i = 0; i < 6; i++)
        crier_pg_params_array(&d->params, &c[i]);
    d->writing = d->n_results;
    d->state = DELIVERY_WRITING;
    if (crier_pg_query(d->pg, SQL_RESULTS, &d->params, delivery_result_cb, d) < 0) {
        d->writing = 0;
        delivery_pause(d);
    }
}

/* Does the next database step: write pending results first, then claim more
 * if there is room. */
static void delivery_pump(crier_delivery *d)
{
    if (d->state != DELIVERY_IDLE || ev_is_active(&d->retry))
        return;
    if (d->n_results > 0) {
        delivery_write_results(d);
        return;
    }
    if (!d->want_claim || d->stopping)
        return;
    int room = d->opts.max_inflight - d->inflight;
    if (room <= 0)
        return;
    int limit = room < d->opts.batch_size ? room : d->opts.batch_size;
    d->want_claim = false;
    snprintf(d->limit_text, sizeof d->limit_text, "%d", limit);
    snprintf(d->lease_text, sizeof d->lease_text, "%d", d->opts.lease_seconds);
    crier_pg_params_reset(&d->params);
    crier_pg_params_text(&d->params, d->limit_text);
    crier_pg_params_text(&d->params, d->lease_text);
    d->state = DELIVERY_CLAIMING;
    if (crier_pg_query(d->pg, SQL_CLAIM, &d->params, delivery_result_cb, d) < 0)
        delivery_pause(d);
}

crier_delivery *crier_delivery_new(struct ev_loop *loop, crier_pg *pg, crier_webhook_sender *sender,
                                   const crier_delivery_options *opts)
{
    crier_delivery *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->loop = loop;
    d->pg = pg;
    d->sender = sender;
    d->opts.batch_size = opts && opts->batch_size > 0 ? opts->batch_size : 200;
    d->opts.max_inflight = opts && opts->max_inflight > 0 ? opts->max_inflight : 256;
    d->opts.lease_seconds = opts && opts->lease_seconds > 0 ? opts->lease_seconds : 60;
    d->opts.max_attempts = opts && opts->max_attempts > 0 ? opts->max_attempts : 8;
    ev_timer_init(&d->retry, delivery_retry_cb, 1.0, 0.);
    d->retry.data = d;
    return d;
}

void crier_delivery_set_sender(crier_delivery *d, crier_webhook_sender *sender)
{
    d->sender = sender;
}

void crier_delivery_kick(crier_delivery *d)
{
    d->want_claim = true;
    delivery_pump(d);
}

bool crier_delivery_idle(const crier_delivery *d)
{
    return d->state == DELIVERY_IDLE && d->inflight == 0 && d->n_results == 0 && d->last_empty &&
           !d->want_claim && !ev_is_active(&d->retry);
}

void crier_delivery_stop(crier_delivery *d)
{
    d->stopping = true;
}

int crier_delivery_pending(const crier_delivery *d)
{
    return d->inflight + (int)d->n_results + (d->state != DELIVERY_IDLE ? 1 : 0);
}

const crier_delivery_stats *crier_delivery_get_stats(const crier_delivery *d)
{
    return &d->stats;
}

void crier_delivery_free(crier_delivery *d)
{
    if (!d)
        return;
    ev_timer_stop(d->loop, &d->retry);
    for (int i = 0; i < 6; i++)
        crier_pg_array_free(&d->cols[i]);
    crier_strbuf_free(&d->errors);
    free(d->results);
    free(d->flying);
    free(d);
}
