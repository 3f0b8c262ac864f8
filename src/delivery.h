/* delivery.h — the delivery worker: claims due deliveries in batches under a
 * lease (FOR UPDATE SKIP LOCKED, autocommit: no transaction is open while
 * sending), hands them to the channel senders, and writes results back in
 * batches with one UPDATE … FROM unnest statement. */
#ifndef CRIER_DELIVERY_H
#define CRIER_DELIVERY_H

#include "pg_async.h"
#include "webhook.h"

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;

typedef struct crier_delivery crier_delivery;

typedef struct {
    int batch_size;      /* deliveries claimed per statement (default 200) */
    int max_inflight;    /* sends in flight at once (default 256) */
    int lease_seconds;   /* a claim is void after this (default 60) */
    int max_attempts;    /* dead after this many failed attempts (default 8) */
} crier_delivery_options;

typedef struct {
    uint64_t claimed;
    uint64_t delivered;
    uint64_t retried;
    uint64_t dead;
} crier_delivery_stats;

/* Creates the worker on its own connection pg (not owned), sending webhooks
 * through sender (not owned). Returns NULL on allocation failure. */
crier_delivery *crier_delivery_new(struct ev_loop *loop, crier_pg *pg, crier_webhook_sender *sender,
                                   const crier_delivery_options *opts);

/* Sets the webhook sender (created after the worker because the sender's
 * completion callback needs the worker). */
void crier_delivery_set_sender(crier_delivery *d, crier_webhook_sender *sender);

/* The webhook sender's completion callback: pass it (with the worker as ud)
 * to crier_webhook_sender_new. */
void crier_delivery_on_webhook_done(void *ud, const crier_webhook_result *result);

/* Asks for a claim pass (new deliveries may be due). */
void crier_delivery_kick(crier_delivery *d);

/* True when nothing is in flight, no result waits to be written, and the last
 * claim found nothing due. */
bool crier_delivery_idle(const crier_delivery *d);

/* Stops claiming; sends in flight complete and their results are written. */
void crier_delivery_stop(crier_delivery *d);

/* Number of sends in flight plus results not yet written. */
int crier_delivery_pending(const crier_delivery *d);

const crier_delivery_stats *crier_delivery_get_stats(const crier_delivery *d);

/* Frees the worker (connection and sender are the caller's). */
void crier_delivery_free(crier_delivery *d);

#endif
