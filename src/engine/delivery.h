/* delivery.h — the delivery worker: claims due deliveries in batches under a
 * lease (crier.claim_deliveries: FOR UPDATE SKIP LOCKED, autocommit, so no
 * transaction is open while sending), hands each to its channel's sender
 * (webhook, email, kafka), extends the leases of sends still in flight, and
 * writes results back in batches (crier.complete_deliveries: one statement per
 * batch that records every attempt, schedules retries, and keeps endpoint
 * health — pause after a run of failures, probe, resume, disable). When both
 * results and room for more wait, one statement writes the results and then
 * claims (one transaction instead of two).
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: email, kafka, webhook (channels), alloc, log, strbuf (base), pg_array,
 * pg_async (pg).
 */
#ifndef CRIER_DELIVERY_H
#define CRIER_DELIVERY_H

#include "email.h"
#include "kafka.h"
#include "pg_async.h"
#include "webhook.h"

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;

typedef struct crier_delivery crier_delivery;

#define CRIER_RETRY_MAX_STEPS 32

/* A retry schedule: delays[n] is the delay in seconds before attempt n+1
 * (delays[0], before the first attempt, is normally 0); n_delays is the number
 * of attempts. Each retry waits a uniformly random time in [0, delays[n]]
 * (full jitter) unless the receiver asked for a time (Retry-After). */
typedef struct {
    int delays[CRIER_RETRY_MAX_STEPS];
    int n_delays;
} crier_retry_schedule;

/* The default schedule: immediately, then about 5 s, 5 min, 30 min, 2 h, 5 h,
 * 10 h, 10 h (8 attempts over about 28 hours). */
extern const crier_retry_schedule crier_retry_default;

/* Parses a PostgreSQL integer array literal "{0,5,300}" into s. Returns 0, or -1
 * if the text is not such a literal, is empty, has a negative delay or more
 * than CRIER_RETRY_MAX_STEPS entries. */
int crier_retry_parse(const char *text, crier_retry_schedule *s);

typedef struct {
    int batch_size;      /* deliveries claimed per statement (default 200) */
    int max_inflight;    /* sends in flight at once (default 512) */
    int lease_seconds;   /* a claim is void after this; extended while a send runs (default 60) */
    int pause_after;     /* consecutive failures that pause a webhook endpoint (default 20) */
    double probe_seconds;   /* first probe delay of a paused endpoint, doubling to 1 h (default 30) */
    double disable_after_s; /* a paused endpoint failing this long is disabled (default 5 days) */
    const char *email_url;  /* smtp[s]://host:port for the email channel (NULL: email deliveries die
                               with an error saying so) */
    const char *email_username, *email_password; /* SMTP AUTH, or NULL */
    const char *email_from;  /* From: when the rule gives none */
    bool no_send;        /* benchmark floor only: complete every claim as delivered without sending */
    bool parked;         /* claim nothing: deliveries stay pending for another process's
                            worker (crier serve --no-deliver, crier bench pipeline) */
} crier_delivery_options;

typedef struct {
    uint64_t claimed;       /* leased: by a claim, or handed over by a fan-out batch */
    uint64_t handed;        /* of those, handed over (crier_delivery_take) */
    uint64_t delivered;
    uint64_t retried;
    uint64_t dead;
    uint64_t released;
    uint64_t probes;
    uint64_t endpoints_paused;
    uint64_t endpoints_resumed;
    uint64_t endpoints_disabled;
} crier_delivery_stats;

/* The channel senders a worker hands deliveries to. Any may be NULL: a
 * delivery for a channel without a sender dies with an error that says how to
 * configure it. Not owned by the worker. */
typedef struct {
    crier_webhook_sender *webhook;
    crier_email_sender *email;
    crier_kafka_sender *kafka;
    /* Replaces the Kafka producer after a fatal error (a fatal error is
     * permanent for a producer): called once the old one has no message in
     * flight; returns the sender to use from then on — a new one, or the old
     * one when no new one could be made (its deliveries keep being retried).
     * NULL: the producer is never replaced. */
    crier_kafka_sender *(*kafka_renew)(void *ud);
    void *kafka_renew_ud;
} crier_delivery_senders;

/* Creates the worker on its own two connections pg and pg2 (not owned): a
 * claim of new deliveries need not wait behind a write of results. Senders
 * are set afterwards with crier_delivery_set_senders (their completion
 * callbacks need the worker). Returns NULL on allocation failure. */
crier_delivery *crier_delivery_new(struct ev_loop *loop, crier_pg *pg, crier_pg *pg2,
                                   const crier_delivery_options *opts);

void crier_delivery_set_senders(crier_delivery *d, const crier_delivery_senders *senders);

/* The senders' completion callbacks: pass them, with the worker as ud, to the
 * sender constructors. */
void crier_delivery_on_webhook_done(void *ud, const crier_webhook_result *result);
void crier_delivery_on_email_done(void *ud, const crier_email_result *result);
void crier_delivery_on_kafka_done(void *ud, const crier_kafka_result *result);

/* Asks for a claim pass (new deliveries may be due). */
void crier_delivery_kick(crier_delivery *d);

/* The fan-out's handoff. A fan-out batch whose deliveries this worker can
 * take at once inserts them already leased (attempt 1, lease_until: as a
 * claim would leave them) and, once committed, hands the rows over instead
 * of announcing them: no claim statement, no update of each row, no round
 * trip between the commit and the send. A crash in between leaves them to
 * their lease, as with a claimed delivery.
 *
 * crier_delivery_reserve (any thread): room for n sends, reserved before the
 * batch's write; false when the worker is stopping, parked, draining a
 * backlog or has no room. Every granted reservation must come back through
 * crier_delivery_take, with the rows or without (NULL: the batch did not
 * commit, or leased none); while one is out the worker is neither idle nor
 * drained. */
bool crier_delivery_reserve(crier_delivery *d, int n);

/* On the worker's loop: returns a reservation of that many, and starts the
 * sends of res's leased rows (columns as crier.claim_deliveries'; a row with a
 * NULL id is none; res is freed), or writes them back as released when the
 * shutdown deadline has passed. Returns the rows taken. */
int crier_delivery_take(crier_delivery *d, PGresult *res, int reserved);

/* The lease a handed-over row must carry (crier_delivery_options.lease_seconds). */
int crier_delivery_lease_seconds(const crier_delivery *d);

/* True when nothing is in flight, no result waits to be written, and the last
 * claim found nothing due. */
bool crier_delivery_idle(crier_delivery *d);

/* Stops claiming; sends in flight complete and their results are written. */
void crier_delivery_stop(crier_delivery *d);

/* Gives up on the sends still in flight (shutdown deadline): each is written
 * back as released — due again at once for any worker, no attempt of its
 * schedule spent — and later completions of those sends are ignored. The
 * caller then runs the loop until crier_delivery_pending is 0. */
void crier_delivery_release(crier_delivery *d);

/* Number of sends in flight plus results not yet written. */
int crier_delivery_pending(crier_delivery *d);

const crier_delivery_stats *crier_delivery_get_stats(const crier_delivery *d);

/* Frees the worker (connection and senders are the caller's). */
void crier_delivery_free(crier_delivery *d);

#endif
