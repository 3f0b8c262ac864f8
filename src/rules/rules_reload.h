/* rules_reload.h — where a holder of a rules generation (the engine's fan-out,
 * the HTTP API's intake) gets its next one: one source of rules (Lua library,
 * rules directory, settings, query backend), a whole new generation loaded and
 * validated before anything changes, its version compared with the running
 * one, and the outcome counted and remembered (for crier.rules_status and
 * /metrics). The holder swaps the generation in itself, between its own units
 * of work; a failure leaves the running generation alone.
 *
 * Layer: rules (src/rules/), may use base.
 * Calls into: rules, log (base).
 */
#ifndef CRIER_RULES_RELOAD_H
#define CRIER_RULES_RELOAD_H

#include "rules.h"

#include <time.h>

/* The outcome of one reload. */
typedef enum {
    CRIER_RELOAD_NEW = 0,   /* a new version loaded: *fresh is the caller's */
    CRIER_RELOAD_UNCHANGED, /* the same version as the running one: nothing to do */
    CRIER_RELOAD_FAILED     /* the new files do not load: the running one stays */
} crier_reload_result;

typedef struct {
    /* the source, set by the holder before the first load (not owned) */
    const char *lua_dir;
    const char *rules_dir;
    const crier_setting *settings;
    size_t n_settings;
    crier_rules_query_fn query_fn; /* given to every generation loaded (NULL: none) */
    void *query_ud;

    /* the state, kept by crier_rules_reloader_load/_reload */
    char version[65];      /* the running version ("" before the first load) */
    int reloads_ok, reloads_failed;
    char last_error[2048]; /* the last rejected version's problems, "" after a good load */
    time_t loaded_at;      /* when the running version was loaded */
    time_t error_at;       /* when last_error was set */
} crier_rules_reloader;

/* Loads the first generation from rl's source. Returns it (the caller's), or
 * NULL with every problem in err ("file:line: message" lines). */
crier_rules *crier_rules_reloader_load(crier_rules_reloader *rl, char *err, size_t err_len);

/* Loads another generation of the running version, for a second holder that
 * runs on another thread (a lua_State serves one thread). Returns it (the
 * caller's), or NULL with err set when the files do not load or changed since
 * the running version was loaded (the reload that follows catches up). */
crier_rules *crier_rules_reloader_load_copy(crier_rules_reloader *rl, char *err, size_t err_len);

/* Loads the source again for holder (a name for the log: "the engine", "the
 * HTTP API") because of why ("SIGHUP", "rules directory changed", …). NEW:
 * *fresh is the new generation, already the running version in rl; UNCHANGED:
 * nothing changes (a reverted broken edit clears last_error); FAILED: the
 * problems are logged and kept in last_error, the counters say so, *fresh is
 * NULL. */
crier_reload_result crier_rules_reloader_reload(crier_rules_reloader *rl, const char *holder, const char *why,
                                                crier_rules **fresh);

#endif
