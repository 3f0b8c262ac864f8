/* fanout.h — the event fan-out worker: claims pending events in batches
 * (FOR UPDATE SKIP LOCKED), guards each logical event with an advisory lock on
 * its natural key, runs the rules, computes notification keys, and in the same
 * transaction inserts the batch's notifications with one unnest statement
 * (ON CONFLICT DO NOTHING RETURNING) plus deliveries for the new rows only.
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: alloc, clock, keys, log, strbuf (base), pg_array, pg_async (pg),
 * rules (rules).
 */
#ifndef CRIER_FANOUT_H
#define CRIER_FANOUT_H

#include "pg_async.h"
#include "rules.h"

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;

typedef struct crier_fanout crier_fanout;

/* The lanes (crier.events.lane): every event starts in the fast lane; one
 * whose rules run longer than slow_after moves to the slow lane, which its
 * own worker (fanout_thread.h) plans apart with the full limits. */
enum { CRIER_FANOUT_LANE_FAST = 0, CRIER_FANOUT_LANE_SLOW = 1 };

typedef struct {
    int batch_size;      /* events claimed per transaction (default 500; slow lane 10) */
    int max_attempts;    /* a failing event is dead after this many tries (default 5) */
    int lane;            /* CRIER_FANOUT_LANE_*: the events this worker claims */
    double slow_after;   /* fast lane: wall seconds one event's rules may run before the
                            event is handed to the slow lane (default 0.1) */
    double batch_budget; /* wall seconds of rules per batch; the events not planned by
                            then are released for the next batch, untouched (default 2) */
    int copy_min;        /* a batch planning at least this many new notifications writes
                            them and their deliveries with COPY (default 256) */
} crier_fanout_options;

typedef struct {
    uint64_t batches;
    uint64_t events_done;
    uint64_t events_failed;  /* rule errors that will be retried */
    uint64_t events_dead;
    uint64_t events_skipped_locked; /* another worker held the natural-key lock */
    uint64_t notifications_created;
    uint64_t notifications_copied; /* of those, written by COPY (crier_fanout_options.copy_min) */
    uint64_t notifications_duplicate;
    uint64_t deliveries_created;
    uint64_t deliveries_handed; /* of those, handed to the delivery worker (crier_fanout_handoff) */
    uint64_t pages;          /* pages of paged audiences written with more to come */
    uint64_t events_slowed;  /* handed to the slow lane (fast lane) */
    uint64_t events_released; /* left for the next batch when the batch's time was up */
} crier_fanout_stats;

/* Called after each committed batch that created deliveries or handed events
 * to the slow lane. */
typedef void (*crier_fanout_committed_fn)(void *ud, uint64_t deliveries_created, uint64_t events_slowed);

/* The delivery worker a batch hands its new deliveries to (delivery.h, the
 * handoff): reserve(ud, n) asks for room for n sends before the batch's
 * write; when granted, the write inserts the deliveries that would be due at
 * once leased for lease_seconds and returns them, and after the batch
 * commits hand(ud, rows, n) gives them over (rows: a PGresult whose first
 * columns are crier.claim_deliveries'; the callee frees it). A batch that
 * does not commit, or leased nothing, calls hand(ud, NULL, n). Called on the
 * fan-out's thread. */
typedef struct {
    bool (*reserve)(void *ud, int n);
    void (*hand)(void *ud, PGresult *rows, int reserved);
    int lease_seconds;
    void *ud;
} crier_fanout_handoff;

/* Creates the worker on its own connection pg (not owned). rules becomes owned
 * by the worker. Returns NULL on allocation failure. */
crier_fanout *crier_fanout_new(struct ev_loop *loop, crier_pg *pg, crier_rules *rules,
                               const crier_fanout_options *opts,
                               crier_fanout_committed_fn committed, void *ud);

/* Sets (or with NULL, clears) where batches hand their deliveries over; none by default. */
void crier_fanout_set_handoff(crier_fanout *f, const crier_fanout_handoff *handoff);

/* Asks for a pass: starts a batch now if idle, or right after the current one. */
void crier_fanout_kick(crier_fanout *f);

/* Hands over a new rules generation (owned by the worker from now on). It is
 * used from the next batch on; the batch in flight finishes on the old one,
 * which is then freed. */
void crier_fanout_set_rules(crier_fanout *f, crier_rules *rules);

/* True when no batch is in flight and the last claim found no due event. */
bool crier_fanout_idle(const crier_fanout *f);

/* True when no batch is in flight. */
bool crier_fanout_between_batches(const crier_fanout *f);

/* True when a batch holds claimed events (past its claim, not yet committed
 * or rolled back). */
bool crier_fanout_holds_events(const crier_fanout *f);

/* The number of events the batch in flight claimed (0 between batches), for
 * the worker's heartbeat. */
int crier_fanout_in_flight(const crier_fanout *f);

/* Stops starting new batches (the one in flight completes). */
void crier_fanout_stop(crier_fanout *f);

const crier_fanout_stats *crier_fanout_get_stats(const crier_fanout *f);

/* Adds every counter of src to dst (the totals of several workers). */
void crier_fanout_stats_add(crier_fanout_stats *dst, const crier_fanout_stats *src);

/* Frees the worker and its rules (the connection is the caller's). */
void crier_fanout_free(crier_fanout *f);

#endif
