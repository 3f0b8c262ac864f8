/* wake.h — when the daemon is asleep, and so when crier.emit must NOTIFY it.
 *
 * A NOTIFY serialises commits in PostgreSQL (a notifying transaction holds one
 * database-wide lock through its commit's WAL flush), so an emit notifies only
 * while a daemon sleeps. The announcement is an advisory lock (two-int key
 * CRIER_WAKE_LOCK_CLASS, CRIER_WAKE_LOCK_OBJECT), not a row: crier.emit's
 * trigger tries to take it shared for its transaction and notifies only when
 * that fails, i.e. while a daemon holds it exclusive (asleep) or waits for it
 * (going to sleep). Going to sleep waits for every transaction that took it
 * shared (emitted believing the daemon awake), then checks once more for
 * events: an emit whose transaction straddles the daemon going to sleep is
 * seen by that check as soon as it commits, never left to the fallback poll.
 * While awake (it found work within the last sleep_after seconds) the daemon
 * probes for pending events every awake_poll seconds, one cheap statement.
 * Under load (the fast lane finished at least linger_rate events a second over
 * the last 100 ms) it lets an idle worker claim every linger seconds instead,
 * without a probe (the claim is one): bigger batches and less database work per event, for a
 * few ms more latency while it is busy anyway (a worker whose batch was full
 * claims again at once either way). It stays under load until the rate falls
 * below half of linger_rate: with one threshold, a loaded host whose emitters
 * dipped under it went back to probing, whose tiny batches doubled the
 * database work per event and kept the emitters under it (docs/BENCHMARKS.md).
 * The default rate is CRIER_WAKE_LINGER_RATE: at 2,000 a loaded host's
 * emitters at 1,700-1,900 events/s never reached it, and the daemon's CPU per
 * event was a fifth higher than lingering gives (bench-emit, twenty-first
 * session); at 1,200 (out again below 600) the 500 events/s that the latency
 * target is measured at never lingers.
 *
 * The lock lives on its own connection: a lock wait there never holds back
 * LISTEN's notifications or a batch. If that connection breaks while asleep,
 * its lock goes with it: emits stop notifying and the fallback poll (--poll)
 * finds their events — the one case that waits for a poll interval.
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: pg_async (pg), log, clock (base).
 */
#ifndef CRIER_WAKE_H
#define CRIER_WAKE_H

#include "pg_async.h"

#include <stdbool.h>
#include <stdint.h>

struct ev_loop;

/* The advisory lock's two-int key ('crie', 1), also in sql/functions/notify_events.sql. */
#define CRIER_WAKE_LOCK_CLASS 1668442469
#define CRIER_WAKE_LOCK_OBJECT 1

typedef enum { CRIER_WAKE_AWAKE = 0, CRIER_WAKE_ACQUIRING, CRIER_WAKE_ASLEEP, CRIER_WAKE_RELEASING } crier_wake_state;

typedef struct crier_wake crier_wake;

/* Called when the fast lane should claim: a probe found pending events, or the
 * daemon has just fallen asleep (its last check). */
typedef void (*crier_wake_kick_fn)(void *ud);
/* Is the fast lane between batches? Asked before falling asleep and before a
 * probe (while a batch runs, the daemon kicks it instead of probing). */
typedef bool (*crier_wake_idle_fn)(void *ud);
/* Events the fast lane has finished so far (a counter that only grows). */
typedef uint64_t (*crier_wake_done_fn)(void *ud);

/* events/s from which the daemon is under load unless --linger-rate says otherwise */
#define CRIER_WAKE_LINGER_RATE 1200

typedef struct {
    double awake_poll;  /* seconds between probes while awake (default 0.002) */
    double sleep_after; /* seconds without work before falling asleep (default 0.1) */
    double linger;      /* seconds between claims under load (default 0.025; < 0: never) */
    double linger_rate; /* events/s from which the daemon is under load (default CRIER_WAKE_LINGER_RATE) */
} crier_wake_options;

/* Whether the daemon is under load after a rate sample: from linger_rate
 * events/s, and while lingering until the rate falls below linger_rate / 2. */
bool crier_wake_under_load(bool lingering, double rate, double linger_rate);

/* Creates the sleep announcement on pg (its own connection, owned by the
 * caller and used for nothing else). The daemon starts awake. Returns NULL
 * when out of memory. */
crier_wake *crier_wake_new(struct ev_loop *loop, crier_pg *pg, const crier_wake_options *opts,
                           crier_wake_kick_fn kick, crier_wake_idle_fn idle, crier_wake_done_fn done,
                           void *ud);

/* The fast lane found work: stay awake, or wake (release the lock). */
void crier_wake_busy(crier_wake *w);

/* From the fallback poll: reconnects a broken connection (the daemon is then
 * awake: its lock went with the session). */
void crier_wake_poll(crier_wake *w);

/* The current state, and how often the daemon fell asleep (for logs, tests). */
crier_wake_state crier_wake_get_state(const crier_wake *w);
uint64_t crier_wake_sleeps(const crier_wake *w);

/* Stops probing and falling asleep (shutdown); the lock goes with the connection. */
void crier_wake_stop(crier_wake *w);

/* Frees w (not its connection). NULL is a no-op. */
void crier_wake_free(crier_wake *w);

#endif
