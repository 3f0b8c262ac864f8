/* http_handlers_status.c — the operator's status page: the HTML page
 * (src/api/status_page.html, embedded at build time by
 * scripts/embed-file.cmake), the JSON it polls (crier.api_status, over every
 * tenant) and the replay of one dead letter from its button. Who may call
 * them is checked before (http_operator.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_handlers.h"

#include "http_query.h"
#include "http_rules.h"

#include <stdio.h>
#include <string.h>

/* The page, generated from src/api/status_page.html. */
extern const char crier_status_page_html[];
extern const size_t crier_status_page_html_len;

int crier_http_status_page(crier_http_request *r)
{
    r->content_type = "text/html; charset=utf-8";
    r->page = true;
    return crier_http_reply(r, 200, crier_status_page_html, crier_status_page_html_len);
}

int crier_http_status_json(crier_http_request *r)
{
    char version[65], max_lag[32];
    const char *values[2];
    PGresult *res;

    crier_http_rules_version(r->ctx->rules, version, sizeof version);
    snprintf(max_lag, sizeof max_lag, "%.3f", r->ctx->healthz_max_lag);
    values[0] = version;
    values[1] = max_lag;
    /* not tenant-scoped: the operator's view over every tenant (the route
     * answers the operator only: http_operator.h) */
    res = crier_http_query(r,
                           "SELECT json_build_object('api_rules_version', $1::text,"
                           "   'max_lag_seconds', $2::float8)::jsonb"
                           " || crier.api_status()::jsonb",
                           2, values);
    if (!res)
        return -1;
    crier_http_reply(r, 200, PQgetvalue(res, 0, 0), (size_t)PQgetlength(res, 0, 0));
    PQclear(res);
    return 0;
}

int crier_http_status_replay(crier_http_request *r)
{
    static const char *const names[] = {"kind", "id"};
    crier_http_field f[2];
    const char *kind;
    long long id;
    char id_text[24];
    const char *values[2];
    PGresult *res;

    if (crier_http_body_fields(r, names, 2, f, false) < 0 ||
        crier_http_field_string(r, &f[0], true, 20, true, &kind) < 0 ||
        crier_http_field_int(r, &f[1], true, 1, 999999999999999999LL, 0, &id) < 0)
        return -1;
    if (strcmp(kind, "delivery") && strcmp(kind, "event"))
        return crier_http_error(r, 400, "invalid_field", "kind must be delivery or event");
    snprintf(id_text, sizeof id_text, "%lld", id);
    values[0] = kind;
    values[1] = id_text;
    /* not tenant-scoped: the operator replays any tenant's dead letter (the
     * route answers the operator only: http_operator.h) */
    res = crier_http_query(
        r,
        "SELECT deliveries, events, json_build_object('kind', $1::text, 'id', $2::bigint,"
        "   'deliveries', deliveries, 'events', events, 'endpoints_enabled', endpoints_enabled)"
        " FROM crier.replay_dead(NULL, NULL, NULL, NULL, NULL, $1::text,"
        "   CASE WHEN $1::text = 'delivery' THEN $2::bigint END,"
        "   CASE WHEN $1::text = 'event' THEN $2::bigint END, 1)",
        2, values);
    if (!res)
        return -1;
    if (!strcmp(PQgetvalue(res, 0, 0), "0") && !strcmp(PQgetvalue(res, 0, 1), "0")) {
        PQclear(res);
        return crier_http_error(r, 404, "not_found",
                                "no dead %s %lld (replayed already, or never dead)", kind, id);
    }
    crier_http_reply(r, 200, PQgetvalue(res, 0, 2), (size_t)PQgetlength(res, 0, 2));
    PQclear(res);
    return 0;
}
