/* http_handlers_ops.c — the operator's endpoints: a notification's status with
 * its deliveries and attempts, dead letters (listed with keyset cursors, and
 * replayed), /metrics in the Prometheus text format and /healthz.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_handlers.h"

#include "clock.h"
#include "http_auth.h"
#include "http_guard.h"
#include "http_page.h"
#include "http_query.h"
#include "http_rules.h"
#include "http_stats.h"
#include "http_stream.h"
#include "log.h"
#include "time_arg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEAD_DEFAULT_LIMIT 50
#define DEAD_REPLAY_CHUNK 1000

int crier_http_notifications_get(crier_http_request *r)
{
    return crier_http_get_by_id(r, "notification", "SELECT crier.api_notification($1, $2::bigint)");
}

typedef struct {
    const char *type, *channel, *kind, *since, *until;
    char since_buf[40], until_buf[40];
} dead_filters;

static int dead_check_filters(crier_http_request *r, dead_filters *d)
{
    if (d->type && !crier_http_valid_id(d->type, 200))
        return crier_http_error(r, 400, "invalid_field", "type must be an event type");
    if (d->channel && strcmp(d->channel, "webhook") && strcmp(d->channel, "email") &&
        strcmp(d->channel, "kafka"))
        return crier_http_error(r, 400, "invalid_field", "channel must be webhook, email or kafka");
    if (d->kind && strcmp(d->kind, "delivery") && strcmp(d->kind, "event"))
        return crier_http_error(r, 400, "invalid_field", "kind must be delivery or event");
    if ((d->since && strlen(d->since) > 64) || (d->until && strlen(d->until) > 64))
        return crier_http_error(r, 400, "invalid_field",
                                "since and until take a timestamp or a duration ago");
    d->since = crier_time_arg(d->since, d->since_buf, sizeof d->since_buf);
    d->until = crier_time_arg(d->until, d->until_buf, sizeof d->until_buf);
    return 0;
}

int crier_http_dead_list(crier_http_request *r)
{
    dead_filters d = {0};
    const char *cursor;
    long long limit;
    int64_t pos[3] = {0, 0, 0};
    char pos_text[3][24], limit_text[24];
    const char *values[9];
    const char *scope[] = {"dead"};
    PGresult *res;
    crier_json_buf out = {0};
    int n;

    if (crier_http_arg(r, "type", &d.type) < 0 || crier_http_arg(r, "channel", &d.channel) < 0 ||
        crier_http_arg(r, "kind", &d.kind) < 0 || crier_http_arg(r, "since", &d.since) < 0 ||
        crier_http_arg(r, "until", &d.until) < 0 || crier_http_arg(r, "cursor", &cursor) < 0 ||
        crier_http_arg_int(r, "limit", 1, CRIER_HTTP_PAGE_MAX, DEAD_DEFAULT_LIMIT, &limit) < 0 ||
        dead_check_filters(r, &d) < 0)
        return -1;
    if (cursor && crier_http_cursor_decode(r, cursor, scope, 1, pos, 3) < 0)
        return -1;
    for (int i = 0; i < 3; i++)
        snprintf(pos_text[i], sizeof pos_text[i], "%lld", (long long)pos[i]);
    snprintf(limit_text, sizeof limit_text, "%lld", limit + 1);
    values[0] = d.type; /* $2, after the tenant */
    values[1] = d.channel;
    values[2] = d.since;
    values[3] = d.until;
    values[4] = d.kind;
    values[5] = cursor ? pos_text[0] : NULL;
    values[6] = pos_text[1];
    values[7] = pos_text[2];
    values[8] = limit_text;
    res = crier_http_query_tenant(
        r,
        "SELECT json_build_object('kind', x.kind, 'id', x.id, 'event_id', x.event_id, 'type', "
        "x.event_type,"
        "   'entity_id', x.entity_id, 'recipient', x.recipient, 'channel', x.channel, 'target', "
        "x.target,"
        "   'attempts', x.attempts, 'died_at', x.died_at, 'last_status', x.last_status,"
        "   'last_error', x.last_error), x.sort_us, x.kind_rank, x.id"
        " FROM crier.api_dead_letters($1, $2, $3, $4::timestamptz, $5::timestamptz, $6, NULL, "
        "NULL) x"
        " WHERE $7::bigint IS NULL OR (x.sort_us, x.kind_rank, x.id) < ($7::bigint, $8::int, "
        "$9::bigint)"
        " ORDER BY x.sort_us DESC, x.kind_rank DESC, x.id DESC LIMIT $10::int",
        9, values);
    if (!res)
        return -1;
    n = PQntuples(res);
    crier_http_page_items(&out, res, (int)limit);
    crier_http_page_cursor(r, &out, "next_cursor", res, n > limit ? (int)limit - 1 : -1, 1, 3,
                           scope, 1);
    crier_json_buf_puts(&out, "}");
    PQclear(res);
    crier_http_reply(r, 200, out.data, out.len);
    crier_json_buf_free(&out);
    return 0;
}

int crier_http_dead_replay(crier_http_request *r)
{
    static const char *const names[] = {"id", "event", "type", "channel", "kind", "since", "until"};
    crier_http_field f[7];
    dead_filters d = {0};
    long long id, event;
    char id_text[24], event_text[24], chunk[16];
    const char *values[8];
    PGresult *res;

    if (crier_http_body_fields(r, names, 7, f, true) < 0 ||
        crier_http_field_int(r, &f[0], false, 1, 999999999999999999LL, 0, &id) < 0 ||
        crier_http_field_int(r, &f[1], false, 1, 999999999999999999LL, 0, &event) < 0 ||
        crier_http_field_string(r, &f[2], false, 200, true, &d.type) < 0 ||
        crier_http_field_string(r, &f[3], false, 20, true, &d.channel) < 0 ||
        crier_http_field_string(r, &f[4], false, 20, true, &d.kind) < 0 ||
        crier_http_field_string(r, &f[5], false, 64, true, &d.since) < 0 ||
        crier_http_field_string(r, &f[6], false, 64, true, &d.until) < 0 ||
        dead_check_filters(r, &d) < 0)
        return -1;
    snprintf(id_text, sizeof id_text, "%lld", id);
    snprintf(event_text, sizeof event_text, "%lld", event);
    snprintf(chunk, sizeof chunk, "%d", DEAD_REPLAY_CHUNK);
    values[0] = d.type; /* $2, after the tenant */
    values[1] = d.channel;
    values[2] = d.since;
    values[3] = d.until;
    values[4] = d.kind;
    values[5] = id ? id_text : NULL;
    values[6] = event ? event_text : NULL;
    values[7] = chunk;
    res = crier_http_query_tenant(
        r,
        "SELECT deliveries, events, endpoints_enabled, remaining,"
        " json_build_object('deliveries', deliveries, 'events', events,"
        "   'endpoints_enabled', endpoints_enabled, 'remaining', remaining)"
        " FROM crier.api_replay_dead($1, $2, $3, $4::timestamptz, $5::timestamptz, $6,"
        "   $7::bigint, $8::bigint, $9::int)",
        8, values);
    if (!res)
        return -1;
    if ((id || event) && !strcmp(PQgetvalue(res, 0, 0), "0") &&
        !strcmp(PQgetvalue(res, 0, 1), "0")) {
        PQclear(res);
        return crier_http_error(r, 404, "not_found", "no dead %s %lld", id ? "delivery" : "event",
                                id ? id : event);
    }
    crier_http_reply(r, 200, PQgetvalue(res, 0, 4), (size_t)PQgetlength(res, 0, 4));
    PQclear(res);
    return 0;
}

/* ------------------------------------------------------------------------
 * /metrics and /healthz: no credentials, no tenant data.
 */

static const char *metric_help(const char *name)
{
    static const struct {
        const char *name, *help, *type;
    } helps[] = {
        {"crier_events",
         "Events in the outbox by state (pending: waiting for fan-out; dead: quarantined).",
         "gauge"},
        {"crier_outbox_oldest_pending_seconds",
         "Seconds the oldest due event has waited for fan-out.", "gauge"},
        {"crier_deliveries", "Deliveries not yet delivered, by state.", "gauge"},
        {"crier_deliveries_oldest_due_seconds",
         "Seconds the oldest due delivery has waited for an attempt.", "gauge"},
        {"crier_endpoints", "Webhook endpoints paused or disabled after failing.", "gauge"},
        {"crier_events_accepted_total",
         "Events accepted into the outbox (fanned out + quarantined - replayed + waiting).", "counter"},
        {"crier_events_fanned_out_total", "Events fanned out (pending to done).", "counter"},
        {"crier_events_quarantined_total", "Events quarantined (dead) after their rules kept failing.",
         "counter"},
        {"crier_events_replayed_total", "Quarantined events replayed (dead to pending).", "counter"},
        {"crier_notifications_created_total", "Notifications created (a duplicate key creates none).",
         "counter"},
        {"crier_notifications_suppressed_total",
         "Deliveries and feed items not sent, by channel and reason (preference, throttle, cancel_on, "
         "unless_read, unless_seen, other).",
         "counter"},
        {"crier_deliveries_total",
         "Deliveries by channel and outcome: delivered, dead, digested (folded into a digest), and "
         "retried attempts.",
         "counter"},
        {"crier_deliveries_replayed_total", "Dead deliveries replayed (dead to pending).", "counter"},
        {"crier_fanout_latency_seconds", "Seconds from an event's commit to its fan-out.", "histogram"},
        {"crier_delivery_latency_seconds", "Seconds from an event's commit to a delivery of it, by channel.",
         "histogram"},
        {"crier_send_duration_seconds", "Seconds one send attempt took, by channel.", "histogram"},
        {"crier_timers_pending", "Timers (delays, digests) waiting to fire, by kind.", "gauge"},
        {"crier_timers_oldest_overdue_seconds",
         "Seconds the most overdue pending timer is late (0: none overdue).", "gauge"},
        {"crier_workers",
         "crier serve workers by liveness (dead: 3 missed heartbeats; stopped: stopped cleanly).",
         "gauge"},
        {"crier_worker_heartbeat_age_seconds", "Seconds since each live worker's last heartbeat.",
         "gauge"},
        {"crier_worker_events_in_flight", "Events each live worker's fan-out batch has claimed.",
         "gauge"},
        {"crier_worker_deliveries_in_flight",
         "Sends each live worker has in flight, with results not yet written.", "gauge"},
        {"crier_rules_info", "The rules version each live crier serve worker runs.", "gauge"},
        {"crier_rules_reloads_total",
         "Rules reloads per worker, accepted (ok) or rejected (failed).", "counter"},
        {"crier_rules_last_reload_failed", "1 when a worker's last rules reload was rejected.",
         "gauge"},
    };
    static _Thread_local char buf[512]; /* the API's threads scrape at once */
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++)
        if (!strcmp(helps[i].name, name) && strlen(name) < 200) {
            snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s %s\n", name, helps[i].help, name,
                     helps[i].type);
            return buf;
        }
    return "";
}

/* The family of a sample's name: a histogram's _bucket, _sum and _count
 * belong to the histogram's name. */
static void metric_family(const char *name, char *out, size_t len)
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    size_t n = strlen(name);
    snprintf(out, len, "%s", name);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t k = strlen(suffixes[i]);
        if (n > k && n - k < len && !strcmp(name + n - k, suffixes[i])) {
            out[n - k] = '\0';
            if (strstr(metric_help(out), " histogram\n"))
                return;
            snprintf(out, len, "%s", name);
        }
    }
}

int crier_http_metrics(crier_http_request *r)
{
    crier_json_buf out = {0};
    char err[512], prev[64] = "";
    PGresult *res = NULL;
    bool up = false;

    /* a connection the server dropped is replaced once */
    for (int attempt = 0; attempt < 2 && !up; attempt++) {
        if (crier_http_db_acquire(r, 5.0, err, sizeof err) < 0) {
            crier_warn("http", "/metrics: %s", err);
            break;
        }
        PQclear(res);
        /* not tenant-scoped: the operator's gauges over every tenant (a
         * public route: no credential, no tenant); PQexec, not
         * crier_http_query, because a failure is a metric, not an error */
        res = PQexec(
            r->pg, "SELECT metric, label1, value1, label2, value2, value FROM crier.api_metrics()"
                   " ORDER BY metric, ord"); /* a family's series adjacent, a histogram's buckets by bound */
        up = PQresultStatus(res) == PGRES_TUPLES_OK;
        if (!up)
            crier_warn("http", "/metrics: %s", PQerrorMessage(r->pg));
        if (!up && PQstatus(r->pg) == CONNECTION_OK)
            break;
        crier_http_db_release(r);
    }
    crier_json_buf_puts(
        &out, "# HELP crier_database_up 1 when the API could query the database for this scrape.\n"
              "# TYPE crier_database_up gauge\n");
    crier_json_buf_printf(&out, "crier_database_up %d\n", up ? 1 : 0);
    for (int i = 0; up && i < PQntuples(res); i++) {
        const char *name = PQgetvalue(res, i, 0);
        char family[64];
        metric_family(name, family, sizeof family);
        if (strcmp(family, prev)) {
            /* HELP/TYPE once per family (a family's rows are adjacent) */
            crier_json_buf_puts(&out, metric_help(family));
            snprintf(prev, sizeof prev, "%s", family);
        }
        crier_json_buf_puts(&out, name);
        if (!PQgetisnull(res, i, 1)) {
            crier_json_buf_printf(&out, "{%s=", PQgetvalue(res, i, 1));
            crier_json_buf_prometheus_label(&out, PQgetvalue(res, i, 2));
            if (!PQgetisnull(res, i, 3)) {
                crier_json_buf_printf(&out, ",%s=", PQgetvalue(res, i, 3));
                crier_json_buf_prometheus_label(&out, PQgetvalue(res, i, 4));
            }
            crier_json_buf_puts(&out, "}");
        }
        crier_json_buf_printf(&out, " %s\n", PQgetvalue(res, i, 5));
    }
    PQclear(res);
    /* the API's own: requests by route, its rules generation, live feeds */
    crier_http_stats_write(r->ctx->stats, &out);
    crier_http_rules_write_metrics(r->ctx->rules, &out);
    crier_http_streams_metrics(r->ctx->streams, &out);
    crier_http_guard_metrics(r->ctx->guard, &out);
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
    crier_http_reply(r, 200, out.data, out.len);
    crier_json_buf_free(&out);
    return 0;
}

/* GET /healthz and /readyz: 200 when the database answers, neither the
 * oldest due event nor the oldest due delivery has waited longer than
 * --healthz-max-lag, and a worker has a live heartbeat (after this server's
 * grace, when it runs workers itself); else 503 with the first reason. */
int crier_http_healthz(crier_http_request *r)
{
    crier_json_buf out = {0};
    char err[512], version[65];
    double max_lag = r->ctx->healthz_max_lag, outbox_lag, delivery_lag;
    int alive;
    bool need_worker = crier_clock_s() >= r->ctx->no_worker_check_from;
    PGresult *res;

    crier_http_rules_version(r->ctx->rules, version, sizeof version);
    res = NULL;
    /* a connection the server dropped is replaced once */
    for (int attempt = 0; attempt < 2; attempt++) {
        PQclear(res);
        res = NULL;
        if (crier_http_db_acquire(r, 2.0, err, sizeof err) < 0)
            break;
        /* not tenant-scoped: the outbox's lag over every tenant (a public
         * route); PQexec, because a failure is an answer of its own */
        res = PQexec(r->pg, "SELECT outbox_lag, delivery_lag, workers_alive FROM crier.api_health()");
        if (PQresultStatus(res) == PGRES_TUPLES_OK)
            break;
        snprintf(err, sizeof err, "%s", PQerrorMessage(r->pg));
        bool broken = PQstatus(r->pg) != CONNECTION_OK;
        crier_http_db_release(r);
        if (!broken)
            break;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        PQclear(res);
        crier_json_buf_puts(
            &out, "{\"status\":\"unavailable\",\"database\":\"unreachable\",\"error\":{\"code\":"
                  "\"database_unavailable\",\"message\":");
        crier_json_buf_string(&out, err);
        crier_json_buf_puts(&out, "}}");
        crier_http_reply(r, 503, out.data, out.len);
        crier_json_buf_free(&out);
        return 0;
    }
    outbox_lag = strtod(PQgetvalue(res, 0, 0), NULL);
    delivery_lag = strtod(PQgetvalue(res, 0, 1), NULL);
    alive = atoi(PQgetvalue(res, 0, 2));
    PQclear(res);
    crier_json_buf_printf(&out,
                          "{\"status\":\"%s\",\"database\":\"ok\",\"outbox_lag_seconds\":%.3f,"
                          "\"delivery_lag_seconds\":%.3f,\"max_lag_seconds\":%.3f,\"workers_alive\":%d,"
                          "\"rules_version\":\"%s\"",
                          outbox_lag > max_lag || delivery_lag > max_lag ? "lagging"
                          : alive == 0 && need_worker                    ? "no_worker"
                                                                         : "ok",
                          outbox_lag, delivery_lag, max_lag, alive, version);
    if (outbox_lag > max_lag)
        crier_json_buf_printf(&out,
                              ",\"error\":{\"code\":\"outbox_lag\",\"message\":\"the oldest due event has waited "
                              "%.1f s for fan-out (limit %.1f s): are the workers running and keeping up? "
                              "see crier status\"}}",
                              outbox_lag, max_lag);
    else if (delivery_lag > max_lag)
        crier_json_buf_printf(&out,
                              ",\"error\":{\"code\":\"delivery_lag\",\"message\":\"the oldest due delivery has "
                              "waited %.1f s for an attempt (limit %.1f s): are the workers running and keeping "
                              "up? see crier status\"}}",
                              delivery_lag, max_lag);
    else if (alive == 0 && need_worker)
        crier_json_buf_puts(&out, ",\"error\":{\"code\":\"no_live_worker\",\"message\":\"no crier serve worker "
                                  "has a live heartbeat: nothing fans out or delivers; start one (see crier "
                                  "status)\"}}");
    else
        crier_json_buf_puts(&out, "}");
    crier_http_reply(r, outbox_lag > max_lag || delivery_lag > max_lag || (alive == 0 && need_worker) ? 503 : 200,
                     out.data, out.len);
    crier_json_buf_free(&out);
    return 0;
}
