/* worker_thread.h — one libev loop on a thread of its own, driven from the
 * owner's thread: requests (kick, stop, a worker's own) arrive as bits through
 * an ev_async, and the thread publishes whether it is idle and whether it has
 * finished, waking the owner when either changes. The delivery side and the
 * slow lane of fan-out run on one each (delivery_thread.c, fanout_thread.c).
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: log (base).
 */
#ifndef CRIER_WORKER_THREAD_H
#define CRIER_WORKER_THREAD_H

#include <stdbool.h>
#include <stddef.h>

struct ev_loop;
typedef struct crier_worker_thread crier_worker_thread;

/* Request bits; a worker may use its own from CRIER_WORKER_OWN upwards. */
enum { CRIER_WORKER_KICK = 1u, CRIER_WORKER_STOP = 2u, CRIER_WORKER_OWN = 4u };

/* What the thread calls, all on the thread itself with ud. */
typedef struct {
    /* the owner's requests (a bit set), handled on the thread's loop */
    void (*requests)(void *ud, unsigned bits);
    /* once per loop pass: nothing due, in flight or waiting to be written */
    bool (*idle)(void *ud);
    /* once per loop pass after a stop request: the loop may end */
    bool (*drained)(void *ud);
    void *ud;
    /* wakes the owner (called on the thread): idle or finished may have changed */
    void (*changed)(void *owner_ud);
    void *owner_ud;
} crier_worker_thread_hooks;

/* Takes loop (ev_loop_new, with the worker's watchers on it; owned from now
 * on) and starts the thread running it, with every signal blocked (signals
 * belong to the owner's loop). Returns the thread, or NULL with err set (the
 * loop is then the caller's again). */
crier_worker_thread *crier_worker_thread_start(struct ev_loop *loop, const crier_worker_thread_hooks *hooks,
                                               const char *name, char *err, size_t err_len);

/* Sends request bits to the thread. Safe from any thread. */
void crier_worker_thread_request(crier_worker_thread *t, unsigned bits);

/* True when the thread was idle at its last loop pass and no request is
 * pending since. Safe from any thread. */
bool crier_worker_thread_idle(crier_worker_thread *t);

/* True once the thread's loop has ended. Safe from any thread. */
bool crier_worker_thread_finished(crier_worker_thread *t);

/* Requests a stop (if not yet), waits for the thread and frees t; the loop
 * is destroyed after teardown(ud, loop) — where the worker stops its watchers
 * and frees what lives on the loop — ran on the caller's thread. NULL is a no-op. */
void crier_worker_thread_join(crier_worker_thread *t, void (*teardown)(void *ud, struct ev_loop *loop));

#endif
