/* http_handlers_events.c — intake and tokens: POST /v1/events (validated by
 * the rules, deduplicated by crier.emit, with Idempotency-Key replays, and a
 * not_before time for a scheduled send),
 * GET /v1/events/{id}, and POST /v1/tokens (a user token for a browser).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_handlers.h"

#include "http_auth.h"
#include "http_query.h"
#include "http_rules.h"
#include "log.h"
#include "time_arg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* An Idempotency-Key: 1..200 visible ASCII characters. */
static bool events_valid_idempotency_key(const char *k)
{
    size_t len = strlen(k);
    if (len == 0 || len > CRIER_HTTP_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (k[i] < 0x21 || k[i] > 0x7e)
            return false;
    return true;
}

static bool events_valid_type(const char *t)
{
    size_t len = strlen(t);
    return len > 0 && len <= 200 &&
           strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == len;
}

int crier_http_events_create(crier_http_request *r)
{
    static const char *const names[] = {"type", "entity_id", "payload", "dedupe_key", "not_before"};
    crier_http_field f[5];
    const char *type, *entity, *payload = "{}", *dedupe, *not_before, *key;
    char err[2048];
    const char *values[7];
    PGresult *res;
    crier_plan_status st;

    key = crier_http_header(r, "Idempotency-Key");
    if (key && !events_valid_idempotency_key(key))
        return crier_http_error(r, 400, "invalid_header",
                                "Idempotency-Key must be 1 to %d visible ASCII characters",
                                CRIER_HTTP_ID_MAX);
    if (crier_http_body_fields(r, names, 5, f, false) < 0 ||
        crier_http_field_string(r, &f[0], true, 200, true, &type) < 0 ||
        crier_http_field_string(r, &f[1], true, 500, true, &entity) < 0 ||
        crier_http_field_string(r, &f[3], false, 500, true, &dedupe) < 0 ||
        crier_http_field_string(r, &f[4], false, 64, true, &not_before) < 0)
        return -1;
    if (not_before && !crier_time_rfc3339_valid(not_before))
        return crier_http_error(r, 400, "invalid_field",
                                "field not_before must be an RFC 3339 time with its offset, such as "
                                "2026-03-01T08:00:00Z or 2026-03-01T09:00:00+01:00");
    if (!events_valid_type(type))
        return crier_http_error(r, 400, "invalid_field",
                                "field type must be 1 to 200 letters, digits, '.', '_' or '-'");
    if (f[2].type) {
        if (strcmp(f[2].type, "object"))
            return crier_http_error(r, 400, "invalid_field",
                                    "field payload must be a JSON object, got %s", f[2].type);
        payload = f[2].value;
    }
    st = crier_http_rules_validate(r->ctx->rules, type, payload, err, sizeof err);
    if (st == CRIER_PLAN_UNKNOWN_TYPE)
        return crier_http_error(r, 422, "unknown_event_type", "%s", err);
    if (st == CRIER_PLAN_INVALID_PAYLOAD)
        return crier_http_error(r, 422, "invalid_payload", "%s", err);
    if (st != CRIER_PLAN_OK) {
        crier_error("http", "request %llu: validating a %s event failed: %s", r->id, type, err);
        return crier_http_error(r, 500, "internal_error",
                                "the rules failed to validate the event (request id %llu)", r->id);
    }
    /* one statement (sql/functions/api_emit.sql): the Idempotency-Key
     * claimed or replayed, the emit, the answer, the answer kept for the key */
    values[0] = type;
    values[1] = entity;
    values[2] = payload;
    values[3] = dedupe;
    values[4] = key;
    values[5] = r->body.data;
    values[6] = not_before;
    res = crier_http_query_tenant_prepared(r, CRIER_HTTP_STMT_EMIT,
                                           "SELECT status, code, body, replayed"
                                           " FROM crier.api_emit($1, $2, $3, $4::jsonb, $5, $6, $7, $8::timestamptz)",
                                           7, values);
    if (!res)
        return -1;
    if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
        PQclear(res);
        return crier_http_error(r, 500, "internal_error", "the event's answer is missing (request id %llu)",
                                r->id);
    }
    unsigned status = (unsigned)strtoul(PQgetvalue(res, 0, 0), NULL, 10);
    if (status == 409) {
        bool in_use = !strcmp(PQgetvalue(res, 0, 1), "in_use");
        PQclear(res);
        if (in_use)
            return crier_http_error(r, 409, "idempotency_key_in_use",
                                    "a request with this Idempotency-Key is still being processed; retry");
        return crier_http_error(r, 409, "idempotency_key_reused",
                                "this Idempotency-Key was used with a different request body");
    }
    crier_http_reply(r, status, PQgetvalue(res, 0, 2), (size_t)PQgetlength(res, 0, 2));
    r->replayed = !strcmp(PQgetvalue(res, 0, 3), "t");
    PQclear(res);
    /* now and then, purge idempotency records past their day: maintenance
     * of every tenant's expired records (no tenant's data is read or
     * answered), hence not tenant-scoped */
    if (r->id % 256 == 0) {
        res = crier_http_query(r,
                               "DELETE FROM crier.api_idempotency WHERE ctid = ANY (ARRAY("
                               " SELECT ctid FROM crier.api_idempotency"
                               " WHERE created_at < now() - interval '24 hours' LIMIT 1000))",
                               0, NULL);
        if (res)
            PQclear(res);
        else
            return -1;
    }
    return 0;
}

int crier_http_events_get(crier_http_request *r)
{
    return crier_http_get_by_id(r, "event", "SELECT crier.api_event($1, $2::bigint, 100)");
}

int crier_http_tokens_create(crier_http_request *r)
{
    static const char *const names[] = {"user", "ttl_seconds"};
    crier_http_field f[2];
    const char *user;
    long long ttl;
    char *token;
    char expires[40];
    time_t exp;
    struct tm tm;
    crier_json_buf out = {0};

    if (crier_http_body_fields(r, names, 2, f, false) < 0 ||
        crier_http_field_string(r, &f[0], true, CRIER_HTTP_ID_MAX, true, &user) < 0 ||
        crier_http_field_int(r, &f[1], false, 1, CRIER_USER_TOKEN_MAX_TTL, 900, &ttl) < 0)
        return -1;
    exp = time(NULL) + (time_t)ttl;
    token = crier_auth_token_sign(r->secret, r->secret_len, r->tenant, user, (long long)exp);
    gmtime_r(&exp, &tm);
    strftime(expires, sizeof expires, "%Y-%m-%dT%H:%M:%SZ", &tm);
    crier_json_buf_puts(&out, "{\"token\":");
    crier_json_buf_string(&out, token);
    crier_json_buf_puts(&out, ",\"user\":");
    crier_json_buf_string(&out, user);
    crier_json_buf_printf(&out, ",\"expires_at\":\"%s\",\"expires_in\":%lld}", expires, ttl);
    crier_http_reply(r, 201, out.data, out.len);
    crier_json_buf_free(&out);
    free(token);
    return 0;
}
