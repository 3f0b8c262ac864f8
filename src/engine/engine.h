/* engine.h — the daemon's core: one libev loop running the fan-out worker and
 * the delivery worker on their own nonblocking PostgreSQL connections, woken by
 * LISTEN/NOTIFY while asleep (wake.h), a cheap probe while awake, a slow poll as fallback, with signal handling (TERM/INT:
 * graceful stop; HUP: rules reload as a new generation) and a watch on the
 * rules directory (inotify) that reloads on change; what runs is recorded in
 * crier.rules_status.
 *
 * Layer: engine (src/engine/), may use pg, rules, channels, base.
 * Calls into: delivery, fanout, timers, wake, retention, log, sd_notify (base), rules (rules), rules_query (rules), webhook (channels).
 */
#ifndef CRIER_ENGINE_H
#define CRIER_ENGINE_H

#include "delivery.h"
#include "fanout.h"
#include "rules.h"
#include "retention.h"
#include "rules_query.h"
#include "wake.h"
#include "webhook.h"

#include <stdbool.h>
#include <stddef.h>

#define CRIER_ENGINE_DEFAULT_FANOUTS 2
#define CRIER_ENGINE_MAX_FANOUTS 8

typedef struct crier_engine_config {
    const char *conninfo;
    /* the rules' queries' connection (crier_database_rules: an unprivileged
     * role); NULL: the rules have no database (a rule that queries fails) */
    const char *rules_conninfo;
    /* what that role may be (UNPRIVILEGED, the default: a privileged one is
     * refused; ALLOW_PRIVILEGED: --allow-privileged-rule-queries, warned) */
    crier_rules_query_role rules_query_role;
    const char *lua_dir;
    const char *rules_dir;
    const crier_setting *settings;
    size_t n_settings;
    crier_fanout_options fanout;
    /* fast-lane fan-out workers on the main loop, each with its own connection
     * and rules generation: while one batch's statements run, the next one's
     * rules run (default CRIER_ENGINE_DEFAULT_FANOUTS, at most
     * CRIER_ENGINE_MAX_FANOUTS) */
    int fanout_connections;
    crier_delivery_options delivery;
    crier_webhook_options webhook;
    crier_email_options email;   /* used when delivery.email_url is set */
    crier_kafka_options kafka;   /* a producer is created when kafka.bootstrap_servers is set */
    double poll_interval;     /* seconds between fallback polls (default 1) */
    crier_wake_options wake;  /* probes while awake, and when to fall asleep (wake.h) */
    crier_retention_options retention; /* how long finished rows stay (retention.h) */
    double shutdown_deadline; /* seconds to let sends finish on TERM before releasing them (default 10) */
    double heartbeat_interval; /* seconds between heartbeats in crier.rules_status (default 5; dead
                                  after 3 missed) */
    bool exit_when_idle;      /* return once no event or delivery is due (demo, tests) */
    bool handle_signals;      /* install TERM/INT/HUP watchers */
    bool watch_rules;         /* reload when a *.lua file in rules_dir changes (inotify) */
    /* tell a service manager (sd_notify.h: systemd, Type=notify) when the
     * engine runs (READY=1), reloads and stops, and ping its watchdog when it
     * set one (crier serve; call crier_sd_notify_init before children start) */
    bool notify_service_manager;
    /* Called from the loop after a new rules version was accepted (not for
     * rejected or unchanged ones), e.g. so the HTTP API reloads its copy. */
    void (*on_rules_reloaded)(void *ud, const char *version);
    void *on_rules_reloaded_ud;
} crier_engine_config;

typedef struct {
    crier_fanout_stats fanout;
    crier_delivery_stats delivery;
} crier_engine_stats;

/* Loads the rules, connects, and runs the loop until a TERM/INT signal (or,
 * with exit_when_idle, until nothing is due). stats (may be NULL) receives the
 * totals. Returns 0 on a clean stop, -1 with err set when startup fails. */
int crier_engine_run(const crier_engine_config *cfg, crier_engine_stats *stats, char *err,
                     size_t err_len);

#endif
