/* fanout_thread.h — a fan-out worker on its own thread and libev loop, with
 * its own connection and rules generation:
 *  - the slow lane: events whose rules ran past the fast lane's soft limit
 *    (fanout.h, lane 1) are planned here, with their own query runner, in
 *    small batches under a time budget, so that a looping or pathological
 *    rule burns its full limit without holding back the fast lane, delivery
 *    or anyone else's events;
 *  - the fast lane's workers after the first (--fanout-connections): each
 *    plans its batches while the others' statements run and while the others
 *    plan, on another core (on one loop, one worker's rules held back the
 *    others' next statements: docs/BENCHMARKS.md, eleventh session).
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: fanout, worker_thread, engine (config), rules, rules_query
 * (rules), pg_async (pg), log (base).
 */
#ifndef CRIER_FANOUT_THREAD_H
#define CRIER_FANOUT_THREAD_H

#include "fanout.h"

#include <stdbool.h>

struct crier_engine_config;
typedef struct crier_fanout_thread crier_fanout_thread;

/* Connects and starts a worker with rules (owned from now on; its queries are
 * given the worker's own runner): the slow lane (number 0) or fast-lane
 * worker number (2, 3, …: its connection is named fanout-<number>).
 * committed is called on the worker's thread after a batch that created
 * deliveries (it must be thread-safe); handoff (NULL: none) is where its
 * batches hand deliveries over (fanout.h; its calls must be thread-safe);
 * changed (on the worker's thread) tells the owner that _idle or _finished
 * may have changed. Returns the running worker, or NULL with err set (rules
 * freed). */
crier_fanout_thread *crier_fanout_thread_start(const struct crier_engine_config *cfg, crier_rules *rules,
                                               int number, crier_fanout_committed_fn committed,
                                               const crier_fanout_handoff *handoff, void (*changed)(void *ud),
                                               void *ud, char *err, size_t err_len);

/* Asks for a pass. Safe from any thread. */
void crier_fanout_thread_kick(crier_fanout_thread *t);

/* Hands over a new generation (owned by the lane from now on), used from its
 * next batch. Safe from any thread. */
void crier_fanout_thread_set_rules(crier_fanout_thread *t, crier_rules *rules);

/* Stops starting batches (the one in flight completes). Safe from any thread. */
void crier_fanout_thread_stop(crier_fanout_thread *t);

/* Nothing due in the lane and no request pending / the loop has ended. */
bool crier_fanout_thread_idle(crier_fanout_thread *t);
bool crier_fanout_thread_finished(crier_fanout_thread *t);

/* What the worker was doing at its last loop pass: events its batch claimed,
 * events fanned out since it started. Safe from any thread (atomics). */
void crier_fanout_thread_activity(crier_fanout_thread *t, int *in_flight, uint64_t *done);
/* At its last loop pass: whether a batch held claimed events
 * (crier_fanout_holds_events), and the batches it had run. Safe from any
 * thread (atomics). */
bool crier_fanout_thread_holds_events(crier_fanout_thread *t);
uint64_t crier_fanout_thread_batches(crier_fanout_thread *t);

/* Stops (if not yet), waits, adds the lane's totals to stats (may be NULL)
 * and frees everything. NULL is a no-op. */
void crier_fanout_thread_join(crier_fanout_thread *t, crier_fanout_stats *stats);

#endif
