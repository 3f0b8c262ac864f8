/* http_rules.c — the HTTP API's generation of the rules, reloaded lazily
 * (see http_rules.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_rules.h"

#include "clock.h"
#include "log.h"
#include "rules_reload.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct crier_http_rules {
    pthread_mutex_t lock; /* the generation, the retry time and the reloader */
    crier_rules *rules;
    atomic_bool stale; /* the engine accepted a version not loaded here yet */
    double retry_at;   /* after a failed reload: when to try again */
    char *lua_dir, *rules_dir;
    crier_rules_reloader reloader; /* the same loader as the engine's (rules_reload.h) */
};

crier_http_rules *crier_http_rules_load(const char *lua_dir, const char *rules_dir,
                                        const crier_setting *settings, size_t n_settings, char *err,
                                        size_t err_len)
{
    crier_http_rules *h = calloc(1, sizeof *h);
    if (!h) {
        crier_set_error(err, err_len, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&h->lock, NULL);
    atomic_init(&h->stale, false);
    h->lua_dir = lua_dir ? strdup(lua_dir) : NULL;
    h->rules_dir = strdup(rules_dir ? rules_dir : "");
    if ((lua_dir && !h->lua_dir) || !h->rules_dir) {
        crier_set_error(err, err_len, "out of memory");
        goto fail;
    }
    /* intake only validates: the API's generation runs no rule and no query */
    h->reloader = (crier_rules_reloader){
        .lua_dir = h->lua_dir, .rules_dir = h->rules_dir, .settings = settings, .n_settings = n_settings};
    h->rules = crier_rules_reloader_load(&h->reloader, err, err_len);
    if (!h->rules)
        goto fail;
    return h;

fail:
    crier_http_rules_free(h);
    return NULL;
}

/* Loads a new generation when the engine accepted a new version (lazy, under
 * the lock). A failure keeps the running one and returns -1. */
static int rules_reload(crier_http_rules *h)
{
    crier_rules *fresh;
    switch (crier_rules_reloader_reload(&h->reloader, "the HTTP API's intake", "the engine accepted a new version",
                                        &fresh)) {
    case CRIER_RELOAD_FAILED:
        return -1;
    case CRIER_RELOAD_UNCHANGED:
        return 0;
    case CRIER_RELOAD_NEW:
        break;
    }
    crier_info("http", "the API validates intake with rules version %.12s", crier_rules_version(fresh));
    crier_rules_free(h->rules);
    h->rules = fresh;
    return 0;
}

void crier_http_rules_changed(crier_http_rules *h)
{
    if (h)
        atomic_store(&h->stale, true);
}

crier_plan_status crier_http_rules_validate(crier_http_rules *h, const char *event_type,
                                            const char *payload_json, char *err, size_t err_len)
{
    crier_plan_status st;
    pthread_mutex_lock(&h->lock);
    /* a notice that arrives during the load sets the flag again: loaded next time */
    if (crier_clock_s() >= h->retry_at && atomic_exchange(&h->stale, false) &&
        rules_reload(h) < 0) {
        atomic_store(&h->stale, true); /* try again, at most every 5 s */
        h->retry_at = crier_clock_s() + 5.0;
    }
    st = crier_rules_validate(h->rules, event_type, payload_json, err, err_len);
    pthread_mutex_unlock(&h->lock);
    return st;
}

void crier_http_rules_version(crier_http_rules *h, char *out, size_t len)
{
    pthread_mutex_lock(&h->lock);
    snprintf(out, len, "%s", crier_rules_version(h->rules));
    pthread_mutex_unlock(&h->lock);
}

void crier_http_rules_write_metrics(crier_http_rules *h, crier_json_buf *b)
{
    pthread_mutex_lock(&h->lock);
    crier_json_buf_puts(b, "# HELP crier_http_rules_reloads_total Reloads of the rules the API "
                           "validates intake with.\n"
                           "# TYPE crier_http_rules_reloads_total counter\n");
    crier_json_buf_printf(b, "crier_http_rules_reloads_total{result=\"ok\"} %d\n", h->reloader.reloads_ok);
    crier_json_buf_printf(b, "crier_http_rules_reloads_total{result=\"failed\"} %d\n",
                          h->reloader.reloads_failed);
    crier_json_buf_puts(
        b, "# HELP crier_http_rules_info The rules version the API validates intake with.\n"
           "# TYPE crier_http_rules_info gauge\ncrier_http_rules_info{version=");
    crier_json_buf_prometheus_label(b, crier_rules_version(h->rules));
    crier_json_buf_puts(b, "} 1\n");
    pthread_mutex_unlock(&h->lock);
}

void crier_http_rules_free(crier_http_rules *h)
{
    if (!h)
        return;
    crier_rules_free(h->rules);
    pthread_mutex_destroy(&h->lock);
    free(h->lua_dir);
    free(h->rules_dir);
    free(h);
}
