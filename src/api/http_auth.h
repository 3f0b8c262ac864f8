/* http_auth.h — who is calling the HTTP API, and the signed strings it hands out.
 *
 *   - API keys (servers): "crk_" + base64url of 32 random bytes, shown once by
 *     crier keys create; the database keeps only their SHA-256, looked up by
 *     index. A key acts for any user of its tenant.
 *   - User tokens (a person's own feed, callable from a browser):
 *     "cut1." + base64url(payload) + "." + base64url(mac), the payload being
 *     {"t": tenant, "u": user, "exp": unix seconds} and the mac
 *     HMAC-SHA256(K_token, "cut1." + base64url(payload)), where K_token is
 *     derived from the tenant's secret (crier.api_tenants). Short-lived.
 *   - Cursors (keyset pagination, and "mark all read up to here"): base64url
 *     of a version byte, the position (big-endian 64-bit values), for version
 *     2 a text signed with it (the database snapshots a head cursor is
 *     bounded by), and a 128-bit HMAC with K_cursor (derived from the
 *     tenant's secret) over a scope (what list, whose), the position and the
 *     text: opaque, and any change to them is detected.
 * Derived keys are HMAC-SHA256(secret, label), so a token's mac can never
 * pass as a cursor's.
 *
 * Layer: api (src/api/), may use pg, rules, base.
 * Calls into: http_query, http_request; alloc, base64, json_writer, log (base).
 */
#ifndef CRIER_HTTP_AUTH_H
#define CRIER_HTTP_AUTH_H

#include "base64.h"
#include "http_request.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CRIER_API_KEY_PREFIX "crk_"
#define CRIER_API_KEY_LEN 47 /* "crk_" + 43 base64url characters */
#define CRIER_USER_TOKEN_PREFIX "cut1."
#define CRIER_USER_TOKEN_MAX_TTL 86400
#define CRIER_CURSOR_MAX_VALUES 4


/* Generates a new API key into out (CRIER_API_KEY_LEN + 1 bytes) from
 * OpenSSL's random generator. Returns 0, or -1 when no randomness is available. */
int crier_auth_key_generate(char *out);

/* The SHA-256 of a key's text, as 64 lower-case hex digits plus NUL. */
void crier_auth_key_hash_hex(const char *key, size_t len, char out[65]);

/* Signs a user token for (tenant, user) valid until exp (unix seconds) with
 * the tenant's secret. Returns a malloc'd token (the caller frees it), or NULL
 * when out of memory. */
char *crier_auth_token_sign(const unsigned char *secret, size_t secret_len, const char *tenant,
                            const char *user, long long exp);

/* Authenticates r from its Authorization header (Bearer crk_… or Bearer
 * cut1.…) on the request's connection: fills r->auth, tenant, user, key_id
 * and the tenant's secret. A user token is refused (403) unless
 * allow_user_token. Returns 0, or -1 with 401 (unauthorized,
 * invalid_api_key, api_key_revoked, invalid_token, token_expired) or 403 set. */
int crier_http_authenticate(crier_http_request *r, bool allow_user_token);

/* The person an authenticated request acts for: a user token's own user, or
 * the ?user= an API key names. A token whose ?user= names someone else is
 * refused (403: "a user token may only <what>"), as is an API key without a
 * usable ?user= (400). Returns 0 with *user set (valid while r lives), or -1
 * with the error response set. */
int crier_http_person(crier_http_request *r, const char *what, const char **user);

/* Encodes a cursor for the position values[0..n) in the list named by
 * scope[0..n_scope) (e.g. {"feed", user, "0"}) with r's tenant secret into
 * out (at least 128 bytes). */
void crier_http_cursor_encode(const crier_http_request *r, const char *const *scope, int n_scope,
                              const int64_t *values, int n, char *out, size_t out_len);

/* Signs a cursor as crier_http_cursor_encode does, with the tenant's secret
 * given as bytes (the live feeds' hub has no request), and with text (NULL:
 * none) signed along with the position. Returns the cursor, malloc'd (the
 * caller frees it); aborts when out of memory (the sizes are ours). */
char *crier_http_cursor_sign(const unsigned char *secret, size_t secret_len,
                             const char *const *scope, int n_scope, const int64_t *values, int n,
                             const char *text);

/* Decodes a cursor made by crier_http_cursor_encode for the same scope.
 * Returns 0, or -1 with 400 invalid_cursor set when it was forged, altered,
 * made for another list, person or tenant, or is not a cursor at all (a
 * cursor with text is refused here). */
int crier_http_cursor_decode(crier_http_request *r, const char *text, const char *const *scope,
                             int n_scope, int64_t *values, int n);

/* Decodes a cursor with or without text (crier_http_cursor_sign) for the
 * same scope: the position into values[0..n), the text into text (text_cap
 * >= 1 bytes, NUL-terminated; "" for a cursor without text). A cursor whose
 * text needs more room is refused. Returns 0, or -1 with 400 invalid_cursor
 * set as crier_http_cursor_decode. */
int crier_http_cursor_decode_text(crier_http_request *r, const char *cursor,
                                  const char *const *scope, int n_scope, int64_t *values, int n,
                                  char *text, size_t text_cap);

#endif
