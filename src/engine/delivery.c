/* delivery.c — lease-based delivery claims, channel dispatch, lease extension and
 * batched result writes (see delivery.h).
 *
 * Claim: crier.claim_deliveries() leases due rows (pending with due_at passed and
 * no lease, or one that expired): lease_until = now() + lease and attempts + 1,
 * state and due_at unchanged (sql/023: an update no index sees), in one
 * autocommit statement — the same statement as the write
 * of the results waiting, when there are some (SQL_COMPLETE_CLAIM: one commit,
 * so one WAL flush, for both). The attempt number is the fencing
 * token: a result (or a lease extension) applies only if the row still carries
 * the attempt this worker claimed, so a worker whose lease expired and was
 * reclaimed cannot overwrite the newer claim's outcome.
 *
 * Two connections (lanes), each running one statement at a time: a write (with
 * the next claim when there is room) on one, and on the other a claim of new
 * work the fan-out announced (crier_delivery_kick) while the first is busy, so
 * a new delivery does not wait behind the write of earlier results. Without
 * news (a backlog being drained) one claim at a time, as in a write and claim:
 * two statements on the same rows at once cost more than they overlap here.
 * One write at a time, in the order the results came.
 *
 * Each send in flight has a slot; the token handed to the sender as its
 * delivery id is the slot index plus a sequence number, so a completion that
 * arrives after its slot was given up (released at shutdown) is recognised and
 * ignored. */
#include "delivery.h"
#include "alloc.h"

#include "log.h"
#include "pg_array.h"
#include "strbuf.h"

#include <ev.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const crier_retry_schedule crier_retry_default = {
    .delays = {0, 5, 300, 1800, 7200, 18000, 36000, 36000},
    .n_delays = 8,
};

/* What a lane's statement in flight does. */
typedef enum {
    DELIVERY_IDLE = 0,
    DELIVERY_CLAIMING,
    DELIVERY_WRITING,
    DELIVERY_EXTENDING,
    DELIVERY_WRITING_CLAIMING, /* one statement: write the results, then claim */
} delivery_state;

enum { N_LANES = 2 };

enum { COL_ID, COL_ATTEMPT, COL_OUTCOME, COL_HEALTH, COL_STATUS, COL_ERROR, COL_EXCERPT, COL_DELAY,
       COL_STARTED, COL_DURATION, COL_PROBE, N_RESULT_COLS };

typedef struct {
    int64_t id;
    int attempt;
    const char *outcome; /* "delivered", "retry", "dead", "released" */
    const char *health;  /* "ok", "fail", "gone", "none" */
    long status;
    size_t error, excerpt; /* offsets in text, or SIZE_MAX */
    double delay_s;
    double started, duration_ms;
    bool probe;
} delivery_result;

typedef struct {
    bool used;
    uint32_t seq;
    int64_t id;
    int attempt;
    int budget_start;
    bool probe;
    double started; /* wall clock, unix seconds */
    crier_retry_schedule schedule;
} flight;

/* One connection and the statement it runs. */
typedef struct {
    crier_delivery *d;
    crier_pg *pg;
    delivery_state state;
    int claim_limit; /* the limit of the claim in flight (0: none) */
    crier_pg_array cols[N_RESULT_COLS];
    crier_pg_params params;
    char num_text[6][32];
} delivery_lane;

struct crier_delivery {
    struct ev_loop *loop;
    delivery_lane lanes[N_LANES];
    crier_delivery_senders senders;
    crier_delivery_options opts;
    bool want_claim;
    bool kicked; /* the fan-out announced new deliveries since the last claim began */
    bool want_extend;
    bool stopping;
    bool last_empty;
    bool last_full;    /* the last claim took its limit: a backlog is being drained */
    bool results_due;  /* the results have lingered long enough (RESULT_LINGER_S) */
    bool released_all; /* crier_delivery_release ran: handed rows are released, not sent */
    int inflight;
    ev_timer retry;
    ev_timer extend;
    ev_timer linger;   /* the results' linger while no backlog is drained */

    flight *flights;
    size_t n_flights, cap_flights;
    size_t *free_slots;
    size_t n_free;
    uint32_t seq;

    delivery_result *results;
    size_t n_results, cap_results;
    crier_strbuf text;
    size_t writing; /* results in the write in flight (0: none) */

    crier_delivery_stats stats;

    /* The fan-out's handoff (crier_delivery_reserve, any thread): room
     * reserved for rows not yet handed over, and what the reservations are
     * checked against, published by the worker at every pump. */
    _Atomic int reserved;
    _Atomic int busy;         /* sends in flight + claims in flight + results unwritten */
    _Atomic bool handoff_open; /* running, not parked, not draining a backlog */

    long kafka_fatal_after; /* test hook: CRIER_TEST_KAFKA_FATAL_AFTER (0: off) */
    long kafka_delivered;
};

/* While no backlog is being drained (the last claim was not full), results
 * wait up to RESULT_LINGER_S, or until RESULT_LINGER_MAX of them, to be
 * written together. Sends are not delayed: the write only records what was
 * sent. At 500 deliveries/s each send's result was written alone, one
 * crier.complete_deliveries and one durable commit per delivery; batches of
 * one cost the server about as much per statement as batches of 200 (docs/
 * BENCHMARKS.md, eighteenth session). A crash in the window sends those
 * deliveries again, with the same key, which at-least-once allows. While a
 * backlog drains, results are written at once: their write carries the next
 * claim. */
#define RESULT_LINGER_S 0.005
#define RESULT_LINGER_MAX 64

/* delivery_dispatch's answer for "not now, try again in a few seconds" (the
 * Kafka producer is being replaced): the attempt is a retriable failure. */
static const char delivery_retry_soon[] =
    "the Kafka producer failed fatally and is being replaced; retried shortly";

/* A claim alone commits without waiting for its WAL flush (synchronous_commit
 * off for its transaction only): the lease is for the other workers, who see
 * it at once; a claim a crash loses leaves the delivery due, and it is sent
 * again with the same key, which at-least-once allows after a crash. Results
 * (SQL_COMPLETE, SQL_COMPLETE_CLAIM) commit durably, and a durable commit
 * flushes every earlier claim with it. One flush less between a new delivery
 * and its send. */
static const char SQL_CLAIM[] =
    "SELECT c.id, c.attempts, c.channel, c.message_id, c.target, c.body, c.secret, c.subject, c.html,"
    "       c.sender, c.retry_schedule, c.budget_start, c.probe"
    " FROM set_config('synchronous_commit', 'off', true) AS s,"
    "      crier.claim_deliveries($1::int, $2::int, $3::float8) AS c";

static const char SQL_COMPLETE[] =
    "SELECT applied, delivered, retried, dead, array_to_string(paused, ', '),"
    "       array_to_string(resumed, ', '), array_to_string(disabled, ', ')"
    " FROM crier.complete_deliveries($1::bigint[], $2::int[], $3::text[], $4::text[], $5::int[],"
    "     $6::text[], $7::text[], $8::float8[], $9::float8[], $10::float8[], $11::bool[],"
    "     $12::int, $13::float8, $14::float8)";

/* The results and the next claim in one statement, so one transaction and one
 * commit (WAL flush) where there were two: complete_deliveries runs first (the
 * claim is LATERAL to its row), and the claim's statements see what it wrote.
 * Each row is a claimed delivery (columns as SQL_CLAIM) followed by the
 * write's summary (as SQL_COMPLETE); when nothing was claimed, one row with
 * the claim's columns NULL. */
#define CLAIM_COLS 13
static const char SQL_COMPLETE_CLAIM[] =
    "SELECT c.id, c.attempts, c.channel, c.message_id, c.target, c.body, c.secret, c.subject, c.html,"
    "       c.sender, c.retry_schedule, c.budget_start, c.probe,"
    "       k.applied, k.delivered, k.retried, k.dead, array_to_string(k.paused, ', '),"
    "       array_to_string(k.resumed, ', '), array_to_string(k.disabled, ', ')"
    " FROM crier.complete_deliveries($1::bigint[], $2::int[], $3::text[], $4::text[], $5::int[],"
    "     $6::text[], $7::text[], $8::float8[], $9::float8[], $10::float8[], $11::bool[],"
    "     $12::int, $13::float8, $14::float8) AS k"
    " LEFT JOIN LATERAL crier.claim_deliveries(CASE WHEN k.applied IS NULL THEN $15::int ELSE $15::int END,"
    "     $16::int, $14::float8) AS c ON true";

/* The fence as in crier.apply_delivery_results: the attempt under a lease (a
 * lease is only ever on a pending delivery, sql/030), no test of state, which
 * would make deliveries_due a way to the rows with no condition at all. */
static const char SQL_EXTEND[] =
    "UPDATE crier.deliveries AS d SET lease_until = now() + make_interval(secs => $3::int)"
    " FROM unnest($1::bigint[], $2::int[]) AS f(id, attempt)"
    " WHERE d.id = f.id AND d.attempts = f.attempt AND d.lease_until IS NOT NULL";

int crier_retry_parse(const char *text, crier_retry_schedule *s)
{
    const char *p = text;
    if (!p || *p++ != '{')
        return -1;
    s->n_delays = 0;
    if (*p == '}')
        return -1;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 100000000 || s->n_delays == CRIER_RETRY_MAX_STEPS)
            return -1;
        s->delays[s->n_delays++] = (int)v;
        p = end;
        if (*p == ',') {
            p++;
            continue;
        }
        return (*p == '}' && p[1] == '\0') ? 0 : -1;
    }
}

static void delivery_pump(crier_delivery *d);
static void delivery_publish(crier_delivery *d);

static void delivery_retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_delivery *d = w->data;
    (void)loop;
    (void)revents;
    for (int i = 0; i < N_LANES; i++) {
        crier_pg *pg = d->lanes[i].pg;
        if (!crier_pg_ok(pg) && crier_pg_reconnect(pg) < 0) {
            ev_timer_set(&d->retry, crier_pg_retry_after(pg, 2.0), 0.);
            ev_timer_start(d->loop, &d->retry);
            return;
        }
    }
    d->want_claim = true;
    delivery_pump(d);
}

static void delivery_extend_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_delivery *d = w->data;
    (void)loop;
    (void)revents;
    if (d->inflight > 0) {
        d->want_extend = true;
        delivery_pump(d);
    }
}

/* A statement failed: no lane starts another until the retry timer has
 * reconnected what broke. */
static void delivery_pause(crier_delivery *d)
{
    if (!ev_is_active(&d->retry)) {
        ev_timer_set(&d->retry, 1.0, 0.);
        ev_timer_start(d->loop, &d->retry);
    }
    delivery_publish(d);
}

/* Full jitter: a uniform delay in [0, ceiling]. */
static double delivery_jitter(int ceiling)
{
    return (double)ceiling * ((double)random() / (double)RAND_MAX);
}

/* ---- flights ---------------------------------------------------------------- */

static int64_t flight_token(const crier_delivery *d, size_t slot)
{
    return ((int64_t)d->flights[slot].seq << 24) | (int64_t)slot;
}

static size_t flight_add(crier_delivery *d)
{
    size_t slot;
    if (d->n_free > 0) {
        slot = d->free_slots[--d->n_free];
    } else {
        if (d->n_flights == d->cap_flights) {
            size_t cap = d->cap_flights ? d->cap_flights * 2 : 256;
            flight *p = crier_xrealloc(d->flights, cap * sizeof *p);
            size_t *q = crier_xrealloc(d->free_slots, cap * sizeof *q);
            d->flights = p;
            d->free_slots = q;
            d->cap_flights = cap;
        }
        slot = d->n_flights++;
    }
    memset(&d->flights[slot], 0, sizeof d->flights[slot]);
    d->flights[slot].used = true;
    d->flights[slot].seq = ++d->seq & 0x7fffffff;
    return slot;
}

/* The flight a sender's token names, or NULL if it was given up. */
static flight *flight_find(crier_delivery *d, int64_t token)
{
    size_t slot = (size_t)(token & 0xffffff);
    uint32_t seq = (uint32_t)(token >> 24);
    if (slot >= d->n_flights || !d->flights[slot].used || d->flights[slot].seq != seq)
        return NULL;
    return &d->flights[slot];
}

static void flight_free(crier_delivery *d, flight *f)
{
    f->used = false;
    d->free_slots[d->n_free++] = (size_t)(f - d->flights);
}

/* ---- results ---------------------------------------------------------------- */

static size_t delivery_keep_text(crier_delivery *d, const char *s)
{
    return s ? crier_strbuf_add(&d->text, s, strlen(s)) : SIZE_MAX;
}

static void delivery_add_result(crier_delivery *d, const flight *f, const char *outcome, const char *health,
                                long status, const char *error, const char *excerpt, double delay_s,
                                double duration_ms)
{
    if (d->n_results == d->cap_results) {
        size_t cap = d->cap_results ? d->cap_results * 2 : 256;
        delivery_result *p = crier_xrealloc(d->results, cap * sizeof *p);
        d->results = p;
        d->cap_results = cap;
    }
    delivery_result *r = &d->results[d->n_results++];
    r->id = f->id;
    r->attempt = f->attempt;
    r->outcome = outcome;
    r->health = health;
    r->status = status;
    r->error = delivery_keep_text(d, error);
    r->excerpt = delivery_keep_text(d, excerpt);
    r->delay_s = delay_s;
    r->started = f->started;
    r->duration_ms = duration_ms;
    r->probe = f->probe;
}

/* Records the outcome of a finished attempt: delivered, a permanent failure, or
 * a retriable one (which dies once the schedule is spent — unless the attempt
 * was a probe, whose failure spends nothing). retry_after_s < 0: none asked. */
static void delivery_finish(crier_delivery *d, flight *f, bool ok, bool permanent, const char *health,
                            long status, const char *error, const char *excerpt, long retry_after_s,
                            double duration_ms)
{
    const char *outcome;
    double delay = 0;
    int used = f->attempt - f->budget_start; /* attempts of the schedule spent so far */

    if (ok) {
        outcome = "delivered";
        d->stats.delivered++;
    } else if (permanent || (!f->probe && used >= f->schedule.n_delays)) {
        outcome = "dead";
        d->stats.dead++;
    } else {
        outcome = "retry";
        int next = used < f->schedule.n_delays ? used : f->schedule.n_delays - 1;
        if (retry_after_s >= 0)
            delay = retry_after_s > 86400 ? 86400.0 : (double)retry_after_s;
        else
            delay = delivery_jitter(f->schedule.delays[next > 0 ? next : 0]);
        d->stats.retried++;
    }
    delivery_add_result(d, f, outcome, health, status, error, excerpt, delay, duration_ms);
    flight_free(d, f);
    d->inflight--;
}

void crier_delivery_on_webhook_done(void *ud, const crier_webhook_result *res)
{
    crier_delivery *d = ud;
    flight *f = flight_find(d, res->token);
    char error[600];
    long st = res->http_status;

    if (!f) {
        delivery_pump(d);
        return;
    }
    if (!res->error && st >= 200 && st < 300) {
        delivery_finish(d, f, true, false, "ok", st, NULL, res->response_excerpt, -1, res->duration_ms);
    } else if (res->error) {
        /* Connection failures and timeouts are retried (a timeout is ambiguous:
         * the receiver may have the request, and dedupes by webhook-id); a
         * target the SSRF guard refused is permanent. */
        snprintf(error, sizeof error, "%s", res->error);
        delivery_finish(d, f, false, res->refused != 0, res->refused ? "none" : "fail", 0, error, NULL, -1,
                        res->duration_ms);
    } else {
        bool retriable = st == 408 || st == 429 || st >= 500;
        snprintf(error, sizeof error, "HTTP %ld%s", st,
                 retriable ? "" : (st == 410 ? " (gone): the endpoint is paused" : " (permanent: not retried)"));
        delivery_finish(d, f, false, !retriable, st == 410 ? "gone" : (retriable ? "fail" : "none"), st, error,
                        res->response_excerpt,
                        (st == 429 || st == 503) ? res->retry_after_s : -1, res->duration_ms);
    }
    delivery_pump(d);
}

void crier_delivery_on_email_done(void *ud, const crier_email_result *res)
{
    crier_delivery *d = ud;
    flight *f = flight_find(d, res->token);
    if (f)
        delivery_finish(d, f, res->error == NULL, res->permanent != 0, "none", res->smtp_code, res->error,
                        NULL, -1, res->duration_ms);
    delivery_pump(d);
}

void crier_delivery_on_kafka_done(void *ud, const crier_kafka_result *res)
{
    crier_delivery *d = ud;
    flight *f = flight_find(d, res->token);
    if (f) {
        if (res->fatal && res->error)
            crier_warn("delivery", "delivery %lld failed with the Kafka producer's fatal error (%s): retried on "
                       "a new producer", (long long)f->id, res->error ? res->error : "unknown");
        delivery_finish(d, f, res->error == NULL, res->error && !res->retriable && !res->fatal, "none", 0,
                        res->error, NULL, -1, res->duration_ms);
        /* test hook: a fatal error after N deliveries, to test the renewal */
        if (!res->error && d->kafka_fatal_after > 0 && ++d->kafka_delivered == d->kafka_fatal_after &&
            d->senders.kafka)
            crier_kafka_test_fatal(d->senders.kafka);
    }
    delivery_pump(d);
}

/* ---- dispatch ---------------------------------------------------------------- */

static const char *cell(PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

/* Hands one claimed row to its channel's sender (token: the flight's, handed
 * back in the result; id: the delivery's, for the log). Returns NULL when accepted,
 * else why it could not be sent (the delivery dies with that error). */
static const char *delivery_dispatch(crier_delivery *d, PGresult *res, int i, int64_t token, int64_t id)
{
    const char *channel = PQgetvalue(res, i, 2);
    const char *message_id = PQgetvalue(res, i, 3);
    const char *target = cell(res, i, 4);
    const char *body = PQgetvalue(res, i, 5);

    if (!strcmp(channel, "webhook")) {
        if (!d->senders.webhook)
            return "no webhook sender in this process";
        crier_webhook_request req = {
            .token = token,
            .delivery_id = id,
            .url = target,
            .body = body,
            .body_len = (size_t)PQgetlength(res, i, 5),
            .webhook_id = message_id,
            .secret = cell(res, i, 6),
        };
        return crier_webhook_send(d->senders.webhook, &req) == 0
                   ? NULL
                   : "the webhook request was refused before sending (invalid URL, secret or header value, "
                     "or a body over the size limit; see the log)";
    }
    if (!strcmp(channel, "email")) {
        if (!d->senders.email || !d->opts.email_url)
            return "no SMTP server is configured: start crier serve with --smtp-url smtp://host:port, then "
                   "replay with crier dead replay --channel email";
        const char *from = cell(res, i, 9) ? cell(res, i, 9) : d->opts.email_from;
        if (!from)
            return "the email has no sender: give the rule's email block a from, or start crier serve with "
                   "--email-from ADDRESS";
        crier_email_request req = {
            .token = token,
            .delivery_id = id,
            .url = d->opts.email_url,
            .username = d->opts.email_username,
            .password = d->opts.email_password,
            .message = {
                .message_id = message_id,
                .from_address = from,
                .to_address = target,
                .subject = cell(res, i, 7),
                .text = PQgetlength(res, i, 5) > 0 ? body : NULL,
                .html = cell(res, i, 8),
            },
        };
        return crier_email_send(d->senders.email, &req) == 0
                   ? NULL
                   : "the email was refused before sending (invalid address or content; see the log)";
    }
    if (!strcmp(channel, "kafka")) {
        if (!d->senders.kafka)
            return "no Kafka cluster is configured: start crier serve with --kafka-brokers host:port, then "
                   "replay with crier dead replay --channel kafka";
        if (crier_kafka_fatal_error(d->senders.kafka)) {
            /* a fatal error is permanent for a producer: once the old one has
             * reported every message it holds, make a new one */
            if (crier_kafka_inflight(d->senders.kafka) > 0 || !d->senders.kafka_renew)
                return delivery_retry_soon;
            d->senders.kafka = d->senders.kafka_renew(d->senders.kafka_renew_ud);
            if (crier_kafka_fatal_error(d->senders.kafka))
                return delivery_retry_soon;
        }
        crier_kafka_request req = {
            .token = token,
            .delivery_id = id,
            .topic = target,
            .key = message_id,
            .payload = body,
            .payload_len = (size_t)PQgetlength(res, i, 5),
        };
        return crier_kafka_send(d->senders.kafka, &req) == 0
                   ? NULL
                   : "the Kafka message was refused before sending (invalid topic; see the log)";
    }
    return "unknown channel: no sender for it in this build";
}

/* Starts the sends of the leased rows of res (columns as SQL_CLAIM's; a row
 * with a NULL id is none): a claim's, the combined statement's, or a fan-out
 * batch's handed over (crier_delivery_take). After crier_delivery_release the
 * rows are written back as released at once instead, and so are rows beyond
 * max_inflight: a fan-out's reservation that raced a claim (each checked the
 * room before the other's was counted) can bring more rows than room, and
 * the senders refuse sends past that limit — a refused send is a dead
 * delivery, a released one is due again at once. Returns how many. */
static int delivery_start_rows(crier_delivery *d, PGresult *res)
{
    int rows = PQntuples(res), n = 0;

    for (int i = 0; i < rows; i++) {
        if (PQgetisnull(res, i, 0))
            continue;
        n++;
        size_t slot = flight_add(d);
        flight *f = &d->flights[slot];
        f->id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        f->attempt = atoi(PQgetvalue(res, i, 1));
        f->budget_start = atoi(PQgetvalue(res, i, 11));
        f->probe = PQgetvalue(res, i, 12)[0] == 't';
        f->started = ev_time();
        if (f->probe)
            d->stats.probes++;
        if (PQgetisnull(res, i, 10) || crier_retry_parse(PQgetvalue(res, i, 10), &f->schedule) < 0)
            f->schedule = crier_retry_default;
        d->inflight++;
        if (d->released_all || d->inflight > d->opts.max_inflight) {
            delivery_add_result(d, f, "released", "none", 0,
                                d->released_all ? "released at shutdown before the send started"
                                                : "released before the send: no room for it (sent again at once)",
                                NULL, 0, 0);
            flight_free(d, f);
            d->inflight--;
            d->stats.released++;
            continue;
        }
        if (d->opts.no_send) {
            delivery_finish(d, f, true, false, "none", 0, NULL, NULL, -1, 0);
            continue;
        }
        const char *refused = delivery_dispatch(d, res, i, flight_token(d, slot), f->id);
        if (refused == delivery_retry_soon) {
            delivery_finish(d, f, false, false, "none", 0, refused, NULL, 2, 0);
        } else if (refused) {
            crier_warn("delivery", "delivery %lld (%s): %s", (long long)f->id, PQgetvalue(res, i, 2), refused);
            delivery_finish(d, f, false, true, "none", 0, refused, NULL, -1, 0);
        }
    }
    if (d->inflight > 0 && !ev_is_active(&d->extend)) {
        double every = d->opts.lease_seconds / 3.0;
        ev_timer_set(&d->extend, every, every);
        ev_timer_start(d->loop, &d->extend);
    }
    return n;
}

/* The claimed rows of res (a claim's, or the combined statement's, whose row
 * without a claimed delivery has a NULL id); limit: the claim's. */
static void delivery_on_claim(crier_delivery *d, PGresult *res, int limit)
{
    int rows = PQntuples(res), n = 0;

    for (int i = 0; i < rows; i++)
        n += !PQgetisnull(res, i, 0);
    d->last_empty = n == 0;
    d->last_full = n >= limit;
    if (d->last_full) /* a full claim: more may be due */
        d->want_claim = true;
    d->stats.claimed += (uint64_t)n;
    delivery_start_rows(d, res);
}

/* The write's summary: its columns start at base (0 for SQL_COMPLETE,
 * CLAIM_COLS for SQL_COMPLETE_CLAIM, whose claim then says whether more is
 * due). */
static void delivery_on_complete(crier_delivery *d, PGresult *res, int base)
{
    const char *what[3] = {"paused after failing", "resumed", "disabled after failing too long"};
    for (int k = 0; k < 3; k++) {
        const char *list = cell(res, 0, base + 4 + k);
        if (!list || !*list)
            continue;
        if (k == 2)
            crier_error("delivery", "endpoint %s: %s (event crier.endpoint.disabled emitted)", what[k], list);
        else
            crier_warn("delivery", "endpoint %s: %s", what[k], list);
        size_t n = 1;
        for (const char *p = list; (p = strstr(p, ", ")); p += 2)
            n++;
        uint64_t *counter = k == 0 ? &d->stats.endpoints_paused
                            : k == 1 ? &d->stats.endpoints_resumed : &d->stats.endpoints_disabled;
        *counter += n;
    }
    /* Drop the written results, keep any that arrived meanwhile. */
    memmove(d->results, d->results + d->writing, (d->n_results - d->writing) * sizeof *d->results);
    d->n_results -= d->writing;
    d->writing = 0;
    if (base == 0)
        d->want_claim = true; /* room was made: more may be due */
    if (d->n_results == 0)
        crier_strbuf_reset(&d->text);
}

static void delivery_result_cb(void *ud, PGresult *res, const char *err)
{
    delivery_lane *lane = ud;
    crier_delivery *d = lane->d;
    delivery_state was = lane->state;
    int limit = lane->claim_limit;
    static const char *names[] = {"idle", "claim", "result write", "lease extension", "result write and claim"};

    lane->state = DELIVERY_IDLE;
    lane->claim_limit = 0;
    if (!res || (PQresultStatus(res) != PGRES_TUPLES_OK && PQresultStatus(res) != PGRES_COMMAND_OK)) {
        crier_error("delivery", "%s failed: %s", names[was], res ? PQresultErrorMessage(res) : err);
        /* Unwritten results stay queued; claimed rows come back when their lease ends. */
        if (was == DELIVERY_WRITING || was == DELIVERY_WRITING_CLAIMING)
            d->writing = 0;
        delivery_pause(d);
        return;
    }
    if (was == DELIVERY_CLAIMING) {
        delivery_on_claim(d, res, limit);
    } else if (was == DELIVERY_WRITING) {
        delivery_on_complete(d, res, 0);
    } else if (was == DELIVERY_WRITING_CLAIMING) {
        delivery_on_complete(d, res, CLAIM_COLS);
        delivery_on_claim(d, res, limit);
    }
    delivery_pump(d);
}

static const char *text_at(crier_delivery *d, size_t off)
{
    return off == SIZE_MAX ? NULL : crier_strbuf_at(&d->text, off);
}

/* Sends lane's statement (its params set) as state, prepared under name on the
 * lane's connection: sent as one-shot queries, the claim and the results were
 * parsed, analyzed and planned for every batch, 13 % of a delivery backend's
 * CPU at 500 deliveries/s (batches of one or two; perf, docs/BENCHMARKS.md,
 * eighteenth session). claim_limit > 0: it claims
 * up to that many, which answers the wish for a claim. On failure the lane is
 * idle again and the worker pauses; returns -1. */
static int delivery_lane_send(crier_delivery *d, delivery_lane *lane, delivery_state state, const char *name,
                              const char *sql, int claim_limit)
{
    lane->state = state;
    lane->claim_limit = claim_limit;
    if (claim_limit > 0) {
        d->want_claim = false;
        d->kicked = false;
    }
    if (crier_pg_query_prepared(lane->pg, name, sql, &lane->params, delivery_result_cb, lane) == 0)
        return 0;
    lane->state = DELIVERY_IDLE;
    lane->claim_limit = 0;
    delivery_pause(d);
    return -1;
}

/* Writes the queued results on lane; with claim_limit > 0, claims up to that
 * many in the same statement (SQL_COMPLETE_CLAIM). */
static void delivery_write_results(crier_delivery *d, delivery_lane *lane, int claim_limit)
{
    static const uint32_t types[N_RESULT_COLS] = {
        CRIER_PG_INT8, CRIER_PG_INT4, CRIER_PG_TEXT, CRIER_PG_TEXT, CRIER_PG_INT4, CRIER_PG_TEXT,
        CRIER_PG_TEXT, CRIER_PG_FLOAT8, CRIER_PG_FLOAT8, CRIER_PG_FLOAT8, CRIER_PG_BOOL};
    crier_pg_array *c = lane->cols;
    d->results_due = false;
    ev_timer_stop(d->loop, &d->linger);
    for (int i = 0; i < N_RESULT_COLS; i++)
        crier_pg_array_begin(&c[i], types[i]);
    for (size_t i = 0; i < d->n_results; i++) {
        const delivery_result *r = &d->results[i];
        crier_pg_array_add_int64(&c[COL_ID], r->id);
        crier_pg_array_add_int32(&c[COL_ATTEMPT], r->attempt);
        crier_pg_array_add_str(&c[COL_OUTCOME], r->outcome);
        crier_pg_array_add_str(&c[COL_HEALTH], r->health);
        if (r->status > 0)
            crier_pg_array_add_int32(&c[COL_STATUS], (int32_t)r->status);
        else
            crier_pg_array_add_null(&c[COL_STATUS]);
        crier_pg_array_add_str(&c[COL_ERROR], text_at(d, r->error));
        crier_pg_array_add_str(&c[COL_EXCERPT], text_at(d, r->excerpt));
        crier_pg_array_add_double(&c[COL_DELAY], r->delay_s);
        crier_pg_array_add_double(&c[COL_STARTED], r->started);
        crier_pg_array_add_double(&c[COL_DURATION], r->duration_ms);
        crier_pg_array_add_bool(&c[COL_PROBE], r->probe);
    }
    crier_pg_params_reset(&lane->params);
    for (int i = 0; i < N_RESULT_COLS; i++)
        crier_pg_params_array(&lane->params, &c[i]);
    snprintf(lane->num_text[0], sizeof lane->num_text[0], "%d", d->opts.pause_after);
    snprintf(lane->num_text[1], sizeof lane->num_text[1], "%.3f", d->opts.disable_after_s);
    snprintf(lane->num_text[2], sizeof lane->num_text[2], "%.3f", d->opts.probe_seconds);
    for (int i = 0; i < 3; i++)
        crier_pg_params_text(&lane->params, lane->num_text[i]);
    if (claim_limit > 0) {
        snprintf(lane->num_text[4], sizeof lane->num_text[4], "%d", claim_limit);
        snprintf(lane->num_text[5], sizeof lane->num_text[5], "%d", d->opts.lease_seconds);
        crier_pg_params_text(&lane->params, lane->num_text[4]);
        crier_pg_params_text(&lane->params, lane->num_text[5]);
    }
    d->writing = d->n_results;
    if (delivery_lane_send(d, lane, claim_limit > 0 ? DELIVERY_WRITING_CLAIMING : DELIVERY_WRITING,
                           claim_limit > 0 ? "crier_delivery_complete_claim" : "crier_delivery_complete",
                           claim_limit > 0 ? SQL_COMPLETE_CLAIM : SQL_COMPLETE, claim_limit) < 0)
        d->writing = 0;
}

static void delivery_extend_leases(crier_delivery *d, delivery_lane *lane)
{
    crier_pg_array *c = lane->cols;
    crier_pg_array_begin(&c[0], CRIER_PG_INT8);
    crier_pg_array_begin(&c[1], CRIER_PG_INT4);
    for (size_t i = 0; i < d->n_flights; i++) {
        if (!d->flights[i].used)
            continue;
        crier_pg_array_add_int64(&c[0], d->flights[i].id);
        crier_pg_array_add_int32(&c[1], d->flights[i].attempt);
    }
    d->want_extend = false;
    crier_pg_params_reset(&lane->params);
    crier_pg_params_array(&lane->params, &c[0]);
    crier_pg_params_array(&lane->params, &c[1]);
    snprintf(lane->num_text[3], sizeof lane->num_text[3], "%d", d->opts.lease_seconds);
    crier_pg_params_text(&lane->params, lane->num_text[3]);
    delivery_lane_send(d, lane, DELIVERY_EXTENDING, "crier_delivery_extend", SQL_EXTEND, 0);
}

/* The sum of the limits of the claims in flight. */
static int delivery_claiming(const crier_delivery *d)
{
    int n = 0;
    for (int i = 0; i < N_LANES; i++)
        n += d->lanes[i].claim_limit;
    return n;
}

/* Room for more sends, counting the claims in flight as full and the results
 * not written yet as sends (with_results: except those a write about to
 * start takes, in the same statement as its claim). Counting the results keeps
 * a slow write from letting the other connection claim and send on and on
 * while nothing is recorded: the leases of sends whose results wait pile up in
 * deliveries_due, every claim has to step over them, and the write that
 * would clear them got slower still — a soak at 5,000 deliveries/s stalled
 * that way, 79,000 leased rows behind one 50-s statement. */
static int delivery_room(crier_delivery *d, bool with_results)
{
    return d->opts.max_inflight - d->inflight - delivery_claiming(d) - (with_results ? (int)d->n_results : 0) -
           atomic_load_explicit(&d->reserved, memory_order_relaxed);
}

static bool delivery_can_claim(crier_delivery *d, bool with_results)
{
    return d->want_claim && !d->stopping && !d->opts.parked && delivery_room(d, with_results) > 0;
}

static delivery_lane *delivery_idle_lane(crier_delivery *d)
{
    for (int i = 0; i < N_LANES; i++)
        if (d->lanes[i].state == DELIVERY_IDLE)
            return &d->lanes[i];
    return NULL;
}

static void delivery_claim(crier_delivery *d, delivery_lane *lane, int limit)
{
    snprintf(lane->num_text[0], sizeof lane->num_text[0], "%d", limit);
    snprintf(lane->num_text[1], sizeof lane->num_text[1], "%d", d->opts.lease_seconds);
    snprintf(lane->num_text[2], sizeof lane->num_text[2], "%.3f", d->opts.probe_seconds);
    crier_pg_params_reset(&lane->params);
    for (int i = 0; i < 3; i++)
        crier_pg_params_text(&lane->params, lane->num_text[i]);
    delivery_lane_send(d, lane, DELIVERY_CLAIMING, "crier_delivery_claim", SQL_CLAIM, limit);
}

/* The results' linger ran out: they are written at the next chance. */
static void delivery_linger_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_delivery *d = w->data;
    (void)loop;
    (void)revents;
    d->results_due = true;
    delivery_pump(d);
}

/* Whether the results waiting are written now (RESULT_LINGER_S); if not, their
 * linger runs. */
static bool delivery_results_due(crier_delivery *d)
{
    if (d->results_due || d->stopping || d->last_full || d->n_results >= RESULT_LINGER_MAX)
        return true;
    if (!ev_is_active(&d->linger)) {
        /* From now, not from the loop's cached time: on a busy host the answer
         * may be read milliseconds after the loop woke, and the linger would
         * then be cut short by as much. */
        ev_now_update(d->loop);
        ev_timer_set(&d->linger, RESULT_LINGER_S, 0.);
        ev_timer_start(d->loop, &d->linger);
    }
    return false;
}

/* Starts what the idle lanes can do: write the results waiting (claiming in
 * the same statement when there is room and a claim is wanted); extend the
 * leases of long sends when due; claim alone — while another claim is in
 * flight only for news from the fan-out (a kick), so a new delivery never
 * waits behind a write, while a backlog is drained one claim at a time. */
static void delivery_pump_lanes(crier_delivery *d)
{
    delivery_lane *lane;

    if (ev_is_active(&d->retry))
        return;
    if (d->inflight == 0 && ev_is_active(&d->extend))
        ev_timer_stop(d->loop, &d->extend);
    if (d->writing == 0 && d->n_results > 0 && delivery_results_due(d) && (lane = delivery_idle_lane(d))) {
        int room = delivery_room(d, false);
        int limit = room < d->opts.batch_size ? room : d->opts.batch_size;
        delivery_write_results(d, lane, delivery_can_claim(d, false) && limit > 0 ? limit : 0);
    }
    if (ev_is_active(&d->retry))
        return;
    if (d->want_extend && d->inflight > 0 && (lane = delivery_idle_lane(d)))
        delivery_extend_leases(d, lane);
    if (ev_is_active(&d->retry) || !delivery_can_claim(d, true))
        return;
    bool claiming = false, claiming_alone = false;
    for (int i = 0; i < N_LANES; i++) {
        claiming |= d->lanes[i].claim_limit > 0;
        claiming_alone |= d->lanes[i].state == DELIVERY_CLAIMING;
    }
    if (claiming_alone || (claiming && !d->kicked) || !(lane = delivery_idle_lane(d)))
        return;
    int room = delivery_room(d, true);
    delivery_claim(d, lane, room < d->opts.batch_size ? room : d->opts.batch_size);
}

/* What a reservation of the fan-out's handoff is checked against (read on
 * other threads): the room taken, and whether handing over is open at all —
 * not while stopping or parked, not while a statement failed, and not while a
 * backlog is drained (the last claim was full: rows due earlier go first). */
static void delivery_publish(crier_delivery *d)
{
    atomic_store_explicit(&d->busy, d->inflight + delivery_claiming(d) + (int)d->n_results, memory_order_relaxed);
    atomic_store_explicit(&d->handoff_open,
                          !d->stopping && !d->opts.parked && !d->last_full && !ev_is_active(&d->retry),
                          memory_order_relaxed);
}

static void delivery_pump(crier_delivery *d)
{
    delivery_pump_lanes(d);
    delivery_publish(d);
}

crier_delivery *crier_delivery_new(struct ev_loop *loop, crier_pg *pg, crier_pg *pg2,
                                   const crier_delivery_options *opts)
{
    crier_delivery *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->loop = loop;
    d->lanes[0].pg = pg;
    d->lanes[1].pg = pg2;
    for (int i = 0; i < N_LANES; i++)
        d->lanes[i].d = d;
    if (opts)
        d->opts = *opts;
    if (d->opts.batch_size <= 0)
        d->opts.batch_size = 200;
    if (d->opts.max_inflight <= 0)
        d->opts.max_inflight = 512; /* two batches of sends overlap (docs/BENCHMARKS.md, bench deliver) */
    if (d->opts.max_inflight > 0xffffff)
        d->opts.max_inflight = 0xffffff;
    if (d->opts.lease_seconds <= 0)
        d->opts.lease_seconds = 60;
    if (d->opts.pause_after <= 0)
        d->opts.pause_after = 20;
    if (d->opts.probe_seconds <= 0)
        d->opts.probe_seconds = 30;
    if (d->opts.disable_after_s <= 0)
        d->opts.disable_after_s = 5 * 86400.0;
    const char *fatal_after = getenv("CRIER_TEST_KAFKA_FATAL_AFTER");
    d->kafka_fatal_after = fatal_after ? atol(fatal_after) : 0;
    ev_timer_init(&d->retry, delivery_retry_cb, 1.0, 0.);
    d->retry.data = d;
    ev_timer_init(&d->extend, delivery_extend_cb, 20., 20.);
    d->extend.data = d;
    ev_timer_init(&d->linger, delivery_linger_cb, RESULT_LINGER_S, 0.);
    d->linger.data = d;
    return d;
}

bool crier_delivery_reserve(crier_delivery *d, int n)
{
    if (n <= 0 || !atomic_load(&d->handoff_open))
        return false;
    int r = atomic_load(&d->reserved);
    do {
        if (atomic_load(&d->busy) + r + n > d->opts.max_inflight)
            return false;
    } while (!atomic_compare_exchange_weak(&d->reserved, &r, r + n));
    return true;
}

int crier_delivery_take(crier_delivery *d, PGresult *res, int reserved)
{
    int n = 0;
    if (res) {
        n = delivery_start_rows(d, res);
        d->stats.claimed += (uint64_t)n;
        d->stats.handed += (uint64_t)n;
        PQclear(res);
    }
    /* the sends are counted as busy before their reservation is given back:
     * a reservation checked in between sees one or the other, never neither */
    delivery_publish(d);
    atomic_fetch_sub(&d->reserved, reserved);
    delivery_pump(d);
    return n;
}

int crier_delivery_lease_seconds(const crier_delivery *d)
{
    return d->opts.lease_seconds;
}

void crier_delivery_set_senders(crier_delivery *d, const crier_delivery_senders *senders)
{
    d->senders = *senders;
}

void crier_delivery_kick(crier_delivery *d)
{
    d->want_claim = true;
    d->kicked = true;
    delivery_pump(d);
}

/* The lanes with a statement in flight. */
static int delivery_lanes_busy(const crier_delivery *d)
{
    int n = 0;
    for (int i = 0; i < N_LANES; i++)
        n += d->lanes[i].state != DELIVERY_IDLE;
    return n;
}

bool crier_delivery_idle(crier_delivery *d)
{
    if (atomic_load(&d->reserved) > 0)
        return false;
    if (d->opts.parked)
        return delivery_lanes_busy(d) == 0 && d->n_results == 0;
    return delivery_lanes_busy(d) == 0 && d->inflight == 0 && d->n_results == 0 && d->last_empty &&
           !d->want_claim && !ev_is_active(&d->retry);
}

void crier_delivery_stop(crier_delivery *d)
{
    d->stopping = true;
    delivery_publish(d);
}

void crier_delivery_release(crier_delivery *d)
{
    d->stopping = true;
    d->released_all = true;
    for (size_t i = 0; i < d->n_flights; i++) {
        flight *f = &d->flights[i];
        if (!f->used)
            continue;
        delivery_add_result(d, f, "released", "none", 0, "released at shutdown before the send completed",
                            NULL, 0, (ev_time() - f->started) * 1000.0);
        flight_free(d, f);
        d->inflight--;
        d->stats.released++;
    }
    delivery_pump(d);
}

int crier_delivery_pending(crier_delivery *d)
{
    return d->inflight + (int)d->n_results + delivery_lanes_busy(d) + atomic_load(&d->reserved);
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
    ev_timer_stop(d->loop, &d->extend);
    ev_timer_stop(d->loop, &d->linger);
    for (int l = 0; l < N_LANES; l++)
        for (int i = 0; i < N_RESULT_COLS; i++)
            crier_pg_array_free(&d->lanes[l].cols[i]);
    crier_strbuf_free(&d->text);
    free(d->results);
    free(d->flights);
    free(d->free_slots);
    free(d);
}
