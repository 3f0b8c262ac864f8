/* retention.h — the retention worker: deletes finished rows once they are older
 * than the operator's period for their kind (done/dead events, finished
 * deliveries with their attempts, fired timers, sent digests, throttle hits),
 * in small batches of one autocommit statement each (crier.retain,
 * sql/functions/retain.sql), so that it never holds a lock for long and never
 * touches a row in use (SKIP LOCKED). Notifications stay: their keys are the
 * dedupe horizon.
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: pg_async (pg), log (base).
 */
#ifndef CRIER_RETENTION_H
#define CRIER_RETENTION_H

#include "pg_async.h"

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;

/* The kinds of rows crier.retain deletes, in the order a pass visits them
 * (deliveries before digests: a sent digest goes once its items did). */
typedef enum {
    CRIER_RETAIN_EVENTS = 0,
    CRIER_RETAIN_DELIVERIES,
    CRIER_RETAIN_TIMERS,
    CRIER_RETAIN_DIGESTS,
    CRIER_RETAIN_THROTTLE_HITS,
    CRIER_RETAIN_KINDS
} crier_retain_kind;

typedef struct {
    /* seconds after which a finished row of each kind is deleted; 0 means the
     * default (7 days), a negative value keeps that kind forever */
    double period[CRIER_RETAIN_KINDS];
    double interval; /* seconds between passes (default 60) */
    int batch;       /* rows per statement (default 1000) */
} crier_retention_options;

typedef struct {
    uint64_t passes;
    uint64_t deleted[CRIER_RETAIN_KINDS];
} crier_retention_stats;

typedef struct crier_retention crier_retention;

/* The name crier.retain knows a kind by ("events", "deliveries", …). */
const char *crier_retention_kind_name(crier_retain_kind kind);

/* Creates the worker on its own connection pg (not owned); the first pass
 * starts after a few seconds. Returns NULL when out of memory. */
crier_retention *crier_retention_new(struct ev_loop *loop, crier_pg *pg, const crier_retention_options *opts);

/* Runs a pass now (when none runs). */
void crier_retention_kick(crier_retention *r);

/* Stops scheduling passes; a statement in flight finishes. */
void crier_retention_stop(crier_retention *r);

/* True when no statement is in flight. */
bool crier_retention_between_batches(const crier_retention *r);

const crier_retention_stats *crier_retention_get_stats(const crier_retention *r);

/* Frees r (not its connection). NULL is a no-op. */
void crier_retention_free(crier_retention *r);

#endif
