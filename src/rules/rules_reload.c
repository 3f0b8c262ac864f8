/* rules_reload.c — loads the next generation of rules for whoever holds one
 * (see rules_reload.h). */
#include "rules_reload.h"

#include "log.h"

#include <stdio.h>
#include <string.h>

/* Loads a generation from rl's source and gives it the query backend. */
static crier_rules *reload_load(crier_rules_reloader *rl, char *err, size_t err_len)
{
    crier_rules *rules =
        crier_rules_load(rl->lua_dir, rl->rules_dir, rl->settings, rl->n_settings, err, err_len);
    if (rules)
        crier_rules_set_query(rules, rl->query_fn, rl->query_ud);
    return rules;
}

crier_rules *crier_rules_reloader_load(crier_rules_reloader *rl, char *err, size_t err_len)
{
    crier_rules *rules = reload_load(rl, err, err_len);
    if (!rules)
        return NULL;
    snprintf(rl->version, sizeof rl->version, "%s", crier_rules_version(rules));
    rl->loaded_at = time(NULL);
    rl->last_error[0] = '\0';
    return rules;
}

crier_rules *crier_rules_reloader_load_copy(crier_rules_reloader *rl, char *err, size_t err_len)
{
    crier_rules *rules = reload_load(rl, err, err_len);
    if (rules && strcmp(crier_rules_version(rules), rl->version) != 0) {
        snprintf(err, err_len, "the rules changed while a copy of version %.12s was loaded (now %.12s)",
                 rl->version, crier_rules_version(rules));
        crier_rules_free(rules);
        return NULL;
    }
    return rules;
}

crier_reload_result crier_rules_reloader_reload(crier_rules_reloader *rl, const char *holder, const char *why,
                                                crier_rules **fresh)
{
    char err[8192];
    crier_rules *rules = reload_load(rl, err, sizeof err);

    *fresh = NULL;
    if (!rules) {
        rl->reloads_failed++;
        snprintf(rl->last_error, sizeof rl->last_error, "%.2000s", err);
        rl->error_at = time(NULL);
        crier_error("rules", "reload (%s) rejected, version %.12s keeps running in %s:\n%s", why, rl->version,
                    holder, err);
        return CRIER_RELOAD_FAILED;
    }
    if (!strcmp(crier_rules_version(rules), rl->version)) {
        crier_debug("rules", "reload (%s) for %s: version %.12s unchanged", why, holder, rl->version);
        crier_rules_free(rules);
        rl->last_error[0] = '\0'; /* a broken edit was reverted */
        return CRIER_RELOAD_UNCHANGED;
    }
    rl->reloads_ok++;
    snprintf(rl->version, sizeof rl->version, "%s", crier_rules_version(rules));
    rl->loaded_at = time(NULL);
    rl->last_error[0] = '\0';
    *fresh = rules;
    return CRIER_RELOAD_NEW;
}
