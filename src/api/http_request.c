/* http_request.c — the request toolkit of the HTTP API's handlers: responses
 * and errors, headers, query parameters, path ids and JSON body fields (see
 * http_request.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_request.h"

#include "log.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Responses
 */

int crier_http_reply(crier_http_request *r, unsigned status, const char *body, size_t len)
{
    r->status = status;
    r->response.len = 0;
    crier_json_buf_add(&r->response, body, len);
    return 0;
}

int crier_http_error(crier_http_request *r, unsigned status, const char *code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->status = status;
    r->content_type = NULL;
    r->response.len = 0;
    crier_json_buf_puts(&r->response, "{\"error\":{\"code\":");
    crier_json_buf_string(&r->response, code);
    crier_json_buf_puts(&r->response, ",\"message\":");
    crier_json_buf_string(&r->response, msg);
    crier_json_buf_puts(&r->response, "}}");
    return -1;
}

void crier_http_error_from_result(crier_http_request *r, const PGresult *res)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!state || PQstatus(r->pg) != CONNECTION_OK) {
        crier_warn("http", "request %llu: the database connection failed: %s", r->id,
                   PQerrorMessage(r->pg));
        crier_http_error(r, 503, "database_unavailable", "the database connection was lost; retry");
    } else if (!strncmp(state, "22", 2)) {
        crier_http_error(r, 400, "invalid_field", "%s", primary ? primary : "invalid value");
    } else if (!strcmp(state, "54000")) {
        crier_http_error(r, 413, "payload_too_large", "%s", primary ? primary : "too large");
    } else if (!strcmp(state, "57014") || !strcmp(state, "55P03") || !strcmp(state, "40001") ||
               !strcmp(state, "40P01")) {
        crier_http_error(r, 503, "database_timeout",
                         "the database did not answer in time (%s); retry",
                         primary ? primary : state);
    } else {
        crier_error("http", "request %llu (%s %s): %s", r->id, r->method, r->path,
                    PQresultErrorMessage(res));
        if (!strcmp(state, "42P01") || !strcmp(state, "42883") || !strcmp(state, "3F000"))
            crier_http_error(
                r, 500, "internal_error",
                "the database schema is not up to date (run crier migrate); request id %llu",
                r->id);
        else
            crier_http_error(r, 500, "internal_error",
                             "internal error; see the server log for request id %llu", r->id);
    }
}

/* ------------------------------------------------------------------------
 * Headers, query parameters, path ids
 */

bool crier_http_has_controls(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return true;
    }
    return false;
}

bool crier_http_valid_id(const char *s, size_t max)
{
    size_t len;
    if (!s)
        return false;
    len = strlen(s);
    if (len == 0 || len > max)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

const char *crier_http_header(crier_http_request *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

int crier_http_arg(crier_http_request *r, const char *name, const char **out)
{
    const char *v = NULL;
    size_t len = 0;
    *out = NULL;
    if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
                                      &len) != MHD_YES)
        return 0;
    if (!v)
        v = "";
    if (strlen(v) != len || crier_http_has_controls(v, len))
        return crier_http_error(r, 400, "invalid_field",
                                "query parameter %s holds control characters", name);
    *out = v;
    return 0;
}

int crier_http_arg_int(crier_http_request *r, const char *name, long long min, long long max,
                       long long def, long long *out)
{
    const char *v;
    char *end;
    if (crier_http_arg(r, name, &v) < 0)
        return -1;
    *out = def;
    if (!v)
        return 0;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno || n < min || n > max || (*v < '0' || *v > '9'))
        return crier_http_error(r, 400, "invalid_field",
                                "query parameter %s must be a whole number from %lld to %lld", name,
                                min, max);
    *out = n;
    return 0;
}

int crier_http_arg_bool(crier_http_request *r, const char *name, bool def, bool *out)
{
    const char *v;
    if (crier_http_arg(r, name, &v) < 0)
        return -1;
    *out = def;
    if (!v)
        return 0;
    if (!strcmp(v, "true") || !strcmp(v, "1"))
        *out = true;
    else if (!strcmp(v, "false") || !strcmp(v, "0"))
        *out = false;
    else
        return crier_http_error(r, 400, "invalid_field", "query parameter %s must be true or false",
                                name);
    return 0;
}

int crier_http_path_id(crier_http_request *r, const char *segment, const char *what, long long *out)
{
    size_t len = strlen(segment);
    if (len == 0 || len > 18 || strspn(segment, "0123456789") != len ||
        (*out = strtoll(segment, NULL, 10)) <= 0)
        return crier_http_error(r, 400, "invalid_field",
                                "%s must be a positive whole number of at most 18 digits", what);
    return 0;
}

/* ------------------------------------------------------------------------
 * JSON body fields
 */

bool crier_http_json_too_deep(const char *s, size_t len, int max_depth)
{
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '\\')
                i++; /* the escaped byte cannot end the string */
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth)
                return true;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return false;
}

int crier_http_body_fields(crier_http_request *r, const char *const *names, int n,
                           crier_http_field *out, bool empty_ok)
{
    crier_json_buf list = {0};
    crier_json_buf expected = {0};
    PGresult *res;
    const char *values[2];

    for (int i = 0; i < n; i++)
        out[i] = (crier_http_field){names[i], NULL, NULL};
    if (!r->body.data || r->body.len == 0) {
        if (empty_ok)
            return 0;
        return crier_http_error(r, 400, "malformed_json",
                                "this endpoint needs a JSON object as the request body");
    }
    if (memchr(r->body.data, '\0', r->body.len))
        return crier_http_error(r, 400, "malformed_json", "the request body holds a NUL byte");
    crier_json_buf_puts(&list, "{");
    for (int i = 0; i < n; i++) {
        crier_json_buf_printf(&list, "%s%s", i ? "," : "", names[i]);
        crier_json_buf_printf(&expected, "%s%s", i ? ", " : "", names[i]);
    }
    crier_json_buf_puts(&list, "}");
    values[0] = r->body.data;
    values[1] = list.data;
    /* not tenant-scoped: PostgreSQL only parses the body (no table is read);
     * its errors are the body's, hence PQexecParams, not crier_http_query */
    res = PQexecParams(r->pg, "SELECT name, type, value FROM crier.api_fields($1, $2::text[])", 2,
                       NULL, values, NULL, NULL, 0);
    crier_json_buf_free(&list);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (state && (!strncmp(state, "22", 2) || !strcmp(state, "54000"))) {
            const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
            const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
            if (!strcmp(state, "54000"))
                crier_http_error(r, 413, "payload_too_large", "%s",
                                 primary ? primary : "the body is too large");
            else
                crier_http_error(r, 400, "malformed_json",
                                 "the request body is not valid JSON: %s%s%s",
                                 primary ? primary : "", detail ? ": " : "", detail ? detail : "");
        } else {
            crier_http_error_from_result(r, res);
        }
        PQclear(res);
        crier_json_buf_free(&expected);
        return -1;
    }
    if (PQntuples(res) < 1 || strcmp(PQgetvalue(res, 0, 1), "object")) {
        crier_http_error(r, 400, "invalid_field", "the request body must be a JSON object, got %s",
                         PQntuples(res) ? PQgetvalue(res, 0, 1) : "nothing");
        PQclear(res);
        crier_json_buf_free(&expected);
        return -1;
    }
    if (!PQgetisnull(res, 0, 2)) {
        crier_http_error(r, 400, "invalid_field",
                         "unknown field(s) in the request body: %s (this endpoint takes %s)",
                         PQgetvalue(res, 0, 2), expected.data ? expected.data : "none");
        PQclear(res);
        crier_json_buf_free(&expected);
        return -1;
    }
    crier_json_buf_free(&expected);
    for (int i = 0; i < n && i + 1 < PQntuples(res); i++) {
        out[i].type = PQgetisnull(res, i + 1, 1) ? NULL : PQgetvalue(res, i + 1, 1);
        out[i].value = PQgetisnull(res, i + 1, 2) ? NULL : PQgetvalue(res, i + 1, 2);
        if (out[i].type && !strcmp(out[i].type, "null")) /* null is absent */
            out[i].type = out[i].value = NULL;
    }
    if (r->parsed)
        PQclear(r->parsed);
    r->parsed = res;
    return 0;
}

/* Whether field f is there with the JSON type want ("a string"'s last
 * word): 1 yes, 0 absent (and not required), -1 error set. */
static int field_present(crier_http_request *r, const crier_http_field *f, bool required,
                         const char *want)
{
    if (!f->type) {
        if (required)
            return crier_http_error(r, 400, "invalid_field", "field %s is required", f->name);
        return 0;
    }
    if (strcmp(f->type, strrchr(want, ' ') + 1))
        return crier_http_error(r, 400, "invalid_field", "field %s must be %s, got %s", f->name,
                                want, f->type);
    return 1;
}

int crier_http_field_string(crier_http_request *r, const crier_http_field *f, bool required,
                            size_t max, bool id, const char **out)
{
    int present = field_present(r, f, required, "a string");
    *out = NULL;
    if (present <= 0)
        return present;
    size_t len = strlen(f->value);
    if (len == 0 || len > max)
        return crier_http_error(r, 400, "invalid_field", "field %s must be 1 to %zu bytes long",
                                f->name, max);
    if (id && !crier_http_valid_id(f->value, max))
        return crier_http_error(r, 400, "invalid_field",
                                "field %s must not hold control characters", f->name);
    *out = f->value;
    return 0;
}

int crier_http_field_int(crier_http_request *r, const crier_http_field *f, bool required,
                         long long min, long long max, long long def, long long *out)
{
    char *end;
    int present = field_present(r, f, required, "a number");
    *out = def;
    if (present <= 0)
        return present;
    errno = 0;
    long long v = strtoll(f->value, &end, 10);
    if (*end || errno || v < min || v > max)
        return crier_http_error(r, 400, "invalid_field",
                                "field %s must be a whole number from %lld to %lld", f->name, min,
                                max);
    *out = v;
    return 0;
}
