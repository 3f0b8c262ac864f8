/* http_rules.h — the HTTP API's own generation of the rules, which validates
 * intake (the event type is declared, the payload passes its checks) on the
 * request threads without touching the engine's: loaded from the same Lua
 * library, rules directory and settings as the engine's, and reloaded lazily,
 * before the next validation, once the engine has accepted a new version. A
 * reload that fails keeps the running generation and is tried again at most
 * every 5 seconds.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: rules, rules_reload (rules), clock, json_writer, log (base).
 */
#ifndef CRIER_HTTP_RULES_H
#define CRIER_HTTP_RULES_H

#include "json_writer.h"
#include "rules.h"

#include <stddef.h>

typedef struct crier_http_rules crier_http_rules;

/* Loads the first generation from lua_dir (NULL: the default), rules_dir and
 * settings[0..n_settings) (kept, not copied: they must outlive the result).
 * Returns it (crier_http_rules_free frees it), or NULL with err set (rules
 * that do not load, out of memory). */
crier_http_rules *crier_http_rules_load(const char *lua_dir, const char *rules_dir,
                                        const crier_setting *settings, size_t n_settings, char *err,
                                        size_t err_len);

/* Notes that the engine accepted a new rules version: the next validation
 * reloads first. Safe from any thread. */
void crier_http_rules_changed(crier_http_rules *rules);

/* Runs an event's type and payload (JSON text) through the running
 * generation, reloading it first when it is stale. Returns the plan status
 * (CRIER_PLAN_OK, or why not with the reason in err). Safe from any thread
 * (validations take turns). */
crier_plan_status crier_http_rules_validate(crier_http_rules *rules, const char *event_type,
                                            const char *payload_json, char *err, size_t err_len);

/* Copies the running generation's version into out (len bytes). */
void crier_http_rules_version(crier_http_rules *rules, char *out, size_t len);

/* Appends the reload counters and the running version in the Prometheus
 * text format (crier_http_rules_reloads_total, crier_http_rules_info). */
void crier_http_rules_write_metrics(crier_http_rules *rules, crier_json_buf *b);

/* Frees the generation and rules. NULL is a no-op. */
void crier_http_rules_free(crier_http_rules *rules);

#endif
