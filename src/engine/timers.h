/* timers.h — the timer worker: fires the durable timers of crier.timers
 * (sql/013_timers.sql) when they are due. It sleeps until the nearest due time
 * (an ev_timer set from the table, re-read when kicked: NOTIFY crier_timers,
 * the engine's poll), then, in one transaction: crier.fire_timers claims a
 * batch FOR UPDATE SKIP LOCKED and fires the delays in place; each due digest
 * comes back locked, its message is rendered by the rules
 * (crier_rules_render_digest) and its notification key computed here (keys.h:
 * from the digest's identity and window, so a second flush of one window adds
 * nothing); crier.flush_digests queues them; COMMIT. Send timers (scheduled
 * sends) make their events pending in crier.fire_timers. When the rules
 * declare recurring schedules (crier.schedule), each pass first runs
 * crier.fire_schedules with them (crier_rules_schedules_json): the due
 * occurrences are emitted in the same transaction, and the worker also wakes
 * for the next occurrence (crier.schedules_next). A crash anywhere rolls
 * back: the timers stay pending and fire later, once.
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: alloc, keys, log, strbuf (base), pg_array, pg_async (pg), rules (rules).
 */
#ifndef CRIER_TIMERS_H
#define CRIER_TIMERS_H

#include "pg_async.h"
#include "rules.h"

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;

typedef struct crier_timers crier_timers;

typedef struct {
    uint64_t passes;            /* transactions that fired something */
    uint64_t fired;             /* timers fired (delays decided, digests sent, sends released) */
    uint64_t events_released;   /* scheduled events made pending (send timers) */
    uint64_t schedule_events;   /* events emitted by recurring schedules */
    uint64_t digests_sent;
    uint64_t render_failures;   /* digests whose rules failed (retried after a back-off) */
} crier_timers_stats;

/* Called after a committed pass that made deliveries due or scheduled events
 * pending (events_due: the fan-out has work). */
typedef void (*crier_timers_committed_fn)(void *ud, uint64_t deliveries_due, uint64_t events_due);

/* Timers claimed per transaction when the caller gives no batch size. */
#define CRIER_TIMERS_DEFAULT_BATCH 500

/* Creates the worker on connection pg (not owned); rules becomes owned by it.
 * batch_size: timers per transaction (0: CRIER_TIMERS_DEFAULT_BATCH). */
crier_timers *crier_timers_new(struct ev_loop *loop, crier_pg *pg, crier_rules *rules, int batch_size,
                               crier_timers_committed_fn committed, void *ud);

/* Something may have changed (a new timer, the engine's poll): re-reads the
 * nearest due time, and fires what is due. */
void crier_timers_kick(crier_timers *t);

/* Hands over a new rules generation, used from the next pass. */
void crier_timers_set_rules(crier_timers *t, crier_rules *rules);

/* True when no pass is in flight and nothing was due at the last look. */
bool crier_timers_idle(const crier_timers *t);

/* True when no transaction is in flight. */
bool crier_timers_between_passes(const crier_timers *t);

/* Stops starting passes (the one in flight completes). */
void crier_timers_stop(crier_timers *t);

const crier_timers_stats *crier_timers_get_stats(const crier_timers *t);

/* Frees the worker and its rules (the connection is the caller's). */
void crier_timers_free(crier_timers *t);

#endif
