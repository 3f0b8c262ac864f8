/* http_auth.c — API keys, user tokens and signed cursors of the HTTP API
 * (see http_auth.h).
 *
 * Layer: api (src/api/), may use pg, rules, base.
 */
#include "http_auth.h"
#include "alloc.h"

#include "base64.h"
#include "http_query.h"
#include "log.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int crier_auth_key_generate(char *out)
{
    unsigned char raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return -1;
    memcpy(out, CRIER_API_KEY_PREFIX, 4);
    crier_base64url_encode(raw, sizeof raw, out + 4);
    OPENSSL_cleanse(raw, sizeof raw);
    return 0;
}

static void auth_hex(const unsigned char *in, size_t len, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = hex[in[i] >> 4];
        out[2 * i + 1] = hex[in[i] & 15];
    }
    out[2 * len] = '\0';
}

/* Decodes lower- or upper-case hex; returns the byte count or -1. */
static long auth_unhex(const char *in, unsigned char *out, size_t out_cap)
{
    size_t len = strlen(in);
    if (len % 2 || len / 2 > out_cap)
        return -1;
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v;
        if (sscanf(in + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (unsigned char)v;
    }
    return (long)(len / 2);
}

void crier_auth_key_hash_hex(const char *key, size_t len, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(key, len, md, &n, EVP_sha256(), NULL);
    auth_hex(md, 32, out);
}

/* HMAC-SHA256(key, msg) into out (32 bytes). */
static void auth_hmac(const unsigned char *key, size_t key_len, const void *msg, size_t msg_len,
                      unsigned char out[32])
{
    unsigned int n = 32;
    HMAC(EVP_sha256(), key, (int)key_len, msg, msg_len, out, &n);
}

/* A key derived from the tenant's secret for one purpose. */
static void auth_derive(const unsigned char *secret, size_t secret_len, const char *label,
                        unsigned char out[32])
{
    auth_hmac(secret, secret_len, label, strlen(label), out);
}

/* Appends s as a JSON string (the token payload's ids have no control
 * characters; quotes and backslashes are escaped). */
static void auth_json_string(crier_json_buf *b, const char *s)
{
    crier_json_buf_string(b, s);
}

char *crier_auth_token_sign(const unsigned char *secret, size_t secret_len, const char *tenant,
                            const char *user, long long exp)
{
    crier_json_buf payload = {0}, token = {0};
    unsigned char key[32], mac[32];
    char *b64;

    crier_json_buf_puts(&payload, "{\"t\":");
    auth_json_string(&payload, tenant);
    crier_json_buf_puts(&payload, ",\"u\":");
    auth_json_string(&payload, user);
    crier_json_buf_printf(&payload, ",\"exp\":%lld}", exp);

    b64 = crier_xmalloc(CRIER_BASE64URL_LEN(payload.len) + 1);
    crier_base64url_encode((const unsigned char *)payload.data, payload.len, b64);
    crier_json_buf_puts(&token, CRIER_USER_TOKEN_PREFIX);
    crier_json_buf_puts(&token, b64);
    free(b64);
    crier_json_buf_free(&payload);

    auth_derive(secret, secret_len, "crier/user-token/v1", key);
    auth_hmac(key, sizeof key, token.data, token.len, mac);
    char mac64[CRIER_BASE64URL_LEN(32) + 1];
    crier_base64url_encode(mac, sizeof mac, mac64);
    crier_json_buf_puts(&token, ".");
    crier_json_buf_puts(&token, mac64);
    OPENSSL_cleanse(key, sizeof key);
    return token.data;
}

/* Copies the secret from a hex column into r. */
static int auth_take_secret(crier_http_request *r, const char *hex)
{
    long n = auth_unhex(hex, r->secret, sizeof r->secret);
    if (n <= 0)
        return -1;
    r->secret_len = (size_t)n;
    return 0;
}

static int auth_api_key(crier_http_request *r, const char *key)
{
    char hash[65];
    const char *values[1] = {hash};
    PGresult *res;

    if (strlen(key) != CRIER_API_KEY_LEN)
        return crier_http_error(r, 401, "invalid_api_key", "the API key is not valid");
    crier_auth_key_hash_hex(key, strlen(key), hash);
    /* looked up by its digest (an index): no comparison of secrets in C. Not
     * tenant-scoped: the key's tenant is what this finds */
    res =
        crier_http_query(r,
                         "SELECT k.id, k.tenant, k.revoked_at IS NOT NULL, encode(t.secret, 'hex')"
                         " FROM crier.api_keys k JOIN crier.api_tenants t ON t.tenant = k.tenant"
                         " WHERE k.key_hash = decode($1, 'hex')",
                         1, values);
    if (!res)
        return -1;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return crier_http_error(r, 401, "invalid_api_key", "the API key is not valid");
    }
    if (!strcmp(PQgetvalue(res, 0, 2), "t")) {
        PQclear(res);
        return crier_http_error(r, 401, "api_key_revoked", "the API key was revoked");
    }
    r->auth = CRIER_HTTP_AUTH_KEY;
    r->key_id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    snprintf(r->tenant, sizeof r->tenant, "%s", PQgetvalue(res, 0, 1));
    if (auth_take_secret(r, PQgetvalue(res, 0, 3)) < 0) {
        PQclear(res);
        return crier_http_error(r, 500, "internal_error", "the tenant's secret is unusable");
    }
    PQclear(res);
    return 0;
}

static int auth_user_token(crier_http_request *r, const char *token)
{
    const char *payload64 = token + strlen(CRIER_USER_TOKEN_PREFIX);
    const char *dot = strchr(payload64, '.');
    unsigned char payload[1024], mac[64], key[32], want[32];
    long payload_len, mac_len;
    const char *values[1];
    PGresult *res;
    long long exp;
    bool ok;

    if (!dot || strlen(token) > 2048)
        return crier_http_error(r, 401, "invalid_token", "the user token is malformed");
    payload_len =
        crier_base64url_decode(payload64, (size_t)(dot - payload64), payload, sizeof payload - 1);
    mac_len = crier_base64url_decode(dot + 1, strlen(dot + 1), mac, sizeof mac);
    if (payload_len <= 0 || mac_len != 32 || memchr(payload, '\0', (size_t)payload_len) ||
        crier_http_json_too_deep((const char *)payload, (size_t)payload_len,
                                 CRIER_HTTP_JSON_MAX_DEPTH))
        return crier_http_error(r, 401, "invalid_token", "the user token is malformed");
    payload[payload_len] = '\0';
    /* PostgreSQL reads the payload (JSON) and the claimed tenant's secret; the
     * claims are trusted only once the mac checks out. Not tenant-scoped (no
     * tenant is known before the mac checks out), and a malformed payload is
     * an invalid token rather than a field error, hence PQexecParams */
    values[0] = (const char *)payload;
    res = PQexecParams(r->pg,
                       "SELECT p.j->>'t', p.j->>'u', p.j->>'exp', encode(t.secret, 'hex')"
                       " FROM (SELECT $1::jsonb AS j) p"
                       " LEFT JOIN crier.api_tenants t ON jsonb_typeof(p.j->'t') = 'string' AND "
                       "t.tenant = p.j->>'t'"
                       " WHERE jsonb_typeof(p.j) = 'object' AND jsonb_typeof(p.j->'u') = 'string'"
                       "   AND jsonb_typeof(p.j->'exp') = 'number'",
                       1, NULL, values, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        bool bad_json = state && !strncmp(state, "22", 2);
        PQclear(res);
        if (bad_json)
            return crier_http_error(r, 401, "invalid_token", "the user token is malformed");
        return crier_http_error(r, 503, "database_unavailable",
                                "the database is unavailable; retry");
    }
    if (PQntuples(res) != 1 || PQgetisnull(res, 0, 3) ||
        auth_take_secret(r, PQgetvalue(res, 0, 3)) < 0) {
        PQclear(res);
        return crier_http_error(r, 401, "invalid_token", "the user token is not valid");
    }
    auth_derive(r->secret, r->secret_len, "crier/user-token/v1", key);
    auth_hmac(key, sizeof key, token, (size_t)(dot - token), want);
    ok = CRYPTO_memcmp(want, mac, 32) == 0;
    OPENSSL_cleanse(key, sizeof key);
    if (!ok) {
        PQclear(res);
        memset(r->secret, 0, sizeof r->secret);
        r->secret_len = 0;
        return crier_http_error(r, 401, "invalid_token", "the user token's signature is not valid");
    }
    exp = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
    if (exp <= (long long)time(NULL)) {
        PQclear(res);
        return crier_http_error(r, 401, "token_expired",
                                "the user token has expired; get a new one");
    }
    if (!crier_http_valid_id(PQgetvalue(res, 0, 0), CRIER_HTTP_ID_MAX) ||
        !crier_http_valid_id(PQgetvalue(res, 0, 1), CRIER_HTTP_ID_MAX)) {
        PQclear(res);
        return crier_http_error(r, 401, "invalid_token", "the user token is not valid");
    }
    r->auth = CRIER_HTTP_AUTH_USER;
    r->token_exp = exp;
    snprintf(r->tenant, sizeof r->tenant, "%s", PQgetvalue(res, 0, 0));
    snprintf(r->user, sizeof r->user, "%s", PQgetvalue(res, 0, 1));
    PQclear(res);
    return 0;
}

int crier_http_authenticate(crier_http_request *r, bool allow_user_token)
{
    const char *h = crier_http_header(r, "Authorization");
    const char *cred, *q = NULL;

    if (!h && r->query_token && crier_http_arg(r, "access_token", &q) < 0)
        return -1;
    if (!h && q) {
        /* a browser's EventSource cannot send headers: a user token may come
         * in the URL; an API key never should (URLs end up in logs) */
        if (strncmp(q, CRIER_USER_TOKEN_PREFIX, strlen(CRIER_USER_TOKEN_PREFIX)))
            return crier_http_error(r, 401, "unauthorized",
                                    "access_token takes a user token (cut1.…) only; send API keys "
                                    "in the Authorization header, never in a URL");
        return auth_user_token(r, q);
    }
    if (!h)
        return crier_http_error(
            r, 401, "unauthorized",
            "send Authorization: Bearer <API key> (crk_…) or Bearer <user token> (cut1.…)");
    if (strncasecmp(h, "Bearer ", 7))
        return crier_http_error(r, 401, "unauthorized", "the Authorization scheme must be Bearer");
    cred = h + 7;
    while (*cred == ' ')
        cred++;
    if (!strncmp(cred, CRIER_API_KEY_PREFIX, strlen(CRIER_API_KEY_PREFIX)))
        return auth_api_key(r, cred);
    if (!strncmp(cred, CRIER_USER_TOKEN_PREFIX, strlen(CRIER_USER_TOKEN_PREFIX))) {
        if (auth_user_token(r, cred) < 0)
            return -1;
        if (!allow_user_token)
            return crier_http_error(r, 403, "forbidden",
                                    "a user token may only use the feed endpoints; use an API key");
        return 0;
    }
    return crier_http_error(r, 401, "unauthorized",
                            "unknown credential: expected an API key (crk_…) or a user "
                            "token (cut1.…)");
}

/* ------------------------------------------------------------------------
 * Cursors
 */

#define CURSOR_VERSION 1      /* the position only */
#define CURSOR_VERSION_TEXT 2 /* the position, then text signed with it */
#define CURSOR_MAC_LEN 16

static void cursor_mac(const unsigned char *secret, size_t secret_len, const char *const *scope,
                       int n_scope, const unsigned char *pos, size_t pos_len, unsigned char out[32])
{
    unsigned char key[32];
    crier_json_buf msg = {0};
    crier_json_buf_puts(&msg, "crier/cursor/v1");
    /* length-prefixed scope parts: no two scopes share an encoding */
    for (int i = 0; i < n_scope; i++) {
        size_t len = strlen(scope[i]);
        unsigned char l[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16),
                              (unsigned char)(len >> 8), (unsigned char)len};
        crier_json_buf_add(&msg, (const char *)l, 4);
        crier_json_buf_add(&msg, scope[i], len);
    }
    crier_json_buf_add(&msg, (const char *)pos, pos_len);
    auth_derive(secret, secret_len, "crier/cursor/v1", key);
    auth_hmac(key, sizeof key, msg.data, msg.len, out);
    OPENSSL_cleanse(key, sizeof key);
    crier_json_buf_free(&msg);
}

char *crier_http_cursor_sign(const unsigned char *secret, size_t secret_len,
                             const char *const *scope, int n_scope, const int64_t *values, int n,
                             const char *text)
{
    size_t text_len = text ? strlen(text) : 0;
    crier_json_buf raw = {0};
    unsigned char mac[32];
    char *out;

    if (n > CRIER_CURSOR_MAX_VALUES)
        n = CRIER_CURSOR_MAX_VALUES;
    crier_json_buf_add(&raw, (const char[]){text ? CURSOR_VERSION_TEXT : CURSOR_VERSION}, 1);
    for (int i = 0; i < n; i++) {
        uint64_t v = (uint64_t)values[i];
        for (int b = 7; b >= 0; b--)
            crier_json_buf_add(&raw, (const char[]){(char)(unsigned char)(v >> (8 * b))}, 1);
    }
    crier_json_buf_add(&raw, text ? text : "", text_len);
    cursor_mac(secret, secret_len, scope, n_scope, (const unsigned char *)raw.data, raw.len, mac);
    crier_json_buf_add(&raw, (const char *)mac, CURSOR_MAC_LEN);
    out = crier_xmalloc(CRIER_BASE64URL_LEN(raw.len) + 1);
    crier_base64url_encode((const unsigned char *)raw.data, raw.len, out);
    crier_json_buf_free(&raw);
    return out;
}

void crier_http_cursor_encode(const crier_http_request *r, const char *const *scope, int n_scope,
                              const int64_t *values, int n, char *out, size_t out_len)
{
    char *text = crier_http_cursor_sign(r->secret, r->secret_len, scope, n_scope, values, n, NULL);
    snprintf(out, out_len, "%s", text);
    free(text);
}

/* Refuses a cursor that is not one (400 invalid_cursor); returns -1. */
static int cursor_refuse(crier_http_request *r)
{
    return crier_http_error(r, 400, "invalid_cursor", "the cursor is not valid");
}

int crier_http_cursor_decode_text(crier_http_request *r, const char *cursor,
                                  const char *const *scope, int n_scope, int64_t *values, int n,
                                  char *text, size_t text_cap)
{
    size_t fixed = 1 + 8 * (size_t)n + CURSOR_MAC_LEN;
    size_t cap = fixed + (text && text_cap > 0 ? text_cap - 1 : 0), body;
    unsigned char *raw = NULL, mac[32];
    long len;
    int rc = -1;

    if (!cursor || strlen(cursor) > CRIER_BASE64URL_LEN(cap) + 4 || !(raw = malloc(cap + 1))) {
        rc = cursor_refuse(r);
        goto out;
    }
    len = crier_base64url_decode(cursor, strlen(cursor), raw, cap + 1);
    if (len < 0 || (size_t)len < fixed || (size_t)len > cap ||
        !((raw[0] == CURSOR_VERSION && (size_t)len == fixed) ||
          (raw[0] == CURSOR_VERSION_TEXT && text))) {
        rc = cursor_refuse(r);
        goto out;
    }
    body = (size_t)len - CURSOR_MAC_LEN;
    cursor_mac(r->secret, r->secret_len, scope, n_scope, raw, body, mac);
    if (CRYPTO_memcmp(mac, raw + body, CURSOR_MAC_LEN) != 0) {
        rc = crier_http_error(
            r, 400, "invalid_cursor",
            "the cursor is not valid here (altered, or made for another list or person)");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        uint64_t v = 0;
        for (int b = 0; b < 8; b++)
            v = (v << 8) | raw[1 + 8 * i + b];
        values[i] = (int64_t)v;
    }
    if (text) {
        size_t text_len = body - (1 + 8 * (size_t)n);
        memcpy(text, raw + 1 + 8 * n, text_len);
        text[text_len] = '\0';
        if (strlen(text) != text_len) { /* signed, so ours: but never a NUL inside */
            rc = cursor_refuse(r);
            goto out;
        }
    }
    rc = 0;
out:
    free(raw);
    return rc;
}

int crier_http_person(crier_http_request *r, const char *what, const char **user)
{
    const char *q;
    if (crier_http_arg(r, "user", &q) < 0)
        return -1;
    if (r->auth == CRIER_HTTP_AUTH_USER) {
        if (q && strcmp(q, r->user))
            return crier_http_error(r, 403, "forbidden", "a user token may only %s", what);
        *user = r->user;
        return 0;
    }
    if (!q)
        return crier_http_error(r, 400, "invalid_field",
                                "query parameter user is required with an API key");
    if (!crier_http_valid_id(q, CRIER_HTTP_ID_MAX))
        return crier_http_error(r, 400, "invalid_field",
                                "query parameter user must be 1 to %d characters",
                                CRIER_HTTP_ID_MAX);
    *user = q;
    return 0;
}

int crier_http_cursor_decode(crier_http_request *r, const char *text, const char *const *scope,
                             int n_scope, int64_t *values, int n)
{
    return crier_http_cursor_decode_text(r, text, scope, n_scope, values, n, NULL, 0);
}
