/* delivery_thread.h — the delivery side of crier serve on its own thread and
 * libev loop: its two PostgreSQL connections, the channels' senders (webhook,
 * email, Kafka) and the delivery worker, so that nothing the fan-out side
 * does (a rule that runs long, a slow batch) delays a send, a lease renewal
 * or the write-back of a result. The fan-out side talks to it only through
 * the thread-safe calls below (worker_thread.c: request bits through an
 * ev_async).
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: delivery, worker_thread, engine (config), kafka, email, webhook
 * (channels), pg_async (pg), log (base).
 */
#ifndef CRIER_DELIVERY_THREAD_H
#define CRIER_DELIVERY_THREAD_H

#include "delivery.h"

#include <stdbool.h>

struct crier_engine_config;
typedef struct crier_delivery_thread crier_delivery_thread;

/* Connects, makes the senders and the worker, and starts the thread. on_change
 * (called on the delivery thread) tells the owner that crier_delivery_thread_
 * idle or _finished may have changed: it must only wake the owner's loop.
 * Returns the running thread, or NULL with err set (nothing is left running). */
crier_delivery_thread *crier_delivery_thread_start(const struct crier_engine_config *cfg,
                                                   void (*on_change)(void *ud), void *ud, char *err,
                                                   size_t err_len);

/* Asks the worker to claim now (new deliveries were committed, a NOTIFY came).
 * Safe from any thread. */
void crier_delivery_thread_kick(crier_delivery_thread *t);

/* The fan-out's handoff (delivery.h, crier_delivery_reserve), safe from any
 * thread: reserve room for n sends before a batch's write; then hand the
 * batch's leased rows over once it has committed (res, freed by the delivery
 * thread; NULL when it did not commit or leased none), always returning the
 * whole reservation. */
bool crier_delivery_thread_reserve(crier_delivery_thread *t, int n);
void crier_delivery_thread_hand(crier_delivery_thread *t, PGresult *res, int reserved);

/* The lease handed-over rows carry (the delivery worker's). */
int crier_delivery_thread_lease_seconds(crier_delivery_thread *t);

/* Begins the graceful stop: no new claims; sends in flight may finish for
 * cfg->shutdown_deadline seconds, then they are released for other workers.
 * Safe from any thread; idempotent. */
void crier_delivery_thread_stop(crier_delivery_thread *t);

/* True when nothing is due, in flight or waiting to be written, and no kick
 * is pending (exit_when_idle). Safe from any thread. */
bool crier_delivery_thread_idle(crier_delivery_thread *t);

/* True once the loop has ended after a stop. Safe from any thread. */
bool crier_delivery_thread_finished(crier_delivery_thread *t);

/* What the delivery side was doing at its last loop pass: sends in flight
 * plus results not yet written, deliveries claimed since it started. Safe
 * from any thread (atomics). */
void crier_delivery_thread_activity(crier_delivery_thread *t, int *in_flight, uint64_t *claimed);

/* Stops (if not yet), waits for the thread, copies the worker's totals to
 * stats (may be NULL) and frees everything. NULL is a no-op. */
void crier_delivery_thread_join(crier_delivery_thread *t, crier_delivery_stats *stats);

#endif
