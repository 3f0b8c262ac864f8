/* webhook.c — the webhook channel's sender: signed JSON POSTs through libcurl's
 * multi interface, driven by a libev loop through curl_ev.c, with pooled easy
 * handles and the multi handle's connection cache so receivers see kept-alive connections.
 * A pooled handle keeps the options every request shares; a request sets its url
 * and body (copied into the transfer's own buffer) and rebuilds its headers in
 * place, allocating nothing once the pool is warm.
 *
 * Response bodies: the first max_response_bytes are kept for the excerpt, the
 * rest is read and discarded so the connection can be reused; once more than
 * WEBHOOK_DISCARD_CAP bytes have been discarded the transfer is aborted (the
 * connection is closed) and the result still carries the HTTP status, because
 * a final status line is a confirmed answer from the receiver. The same holds
 * when the body stalls past the total timeout after a final status arrived.
 *
 * Targets: every socket a transfer would open is first put to the SSRF guard
 * (target_guard.c) through curl_ev's per-transfer guard, with the address
 * curl resolved, so names that resolve or re-resolve to internal addresses
 * are caught; when the guard refused every address tried, the result has
 * refused = 1 and the guard's message. Only http and https, no redirects (a
 * 3xx is the answer), bodies up to max_body_bytes.
 *
 * Signatures: the secret may be a whitespace-separated list of "whsec_"
 * secrets (rotation); webhook-signature then holds one "v1,…" per secret.
 *
 * Other choices: zero (or negative) option fields mean the default; requests
 * whose url or webhook_id hold control characters (CR, LF, other C0, DEL), whose
 * url has spaces or is not http(s), whose webhook_id is empty or longer than
 * WEBHOOK_MAX_ID_LEN, or whose secret is unusable are refused with -1; every
 * CURLE_OPERATION_TIMEDOUT (connect or total) sets timed_out; the sender may be
 * freed from inside a done callback (it is destroyed once dispatch unwinds). */
#include "webhook.h"

#include "base64.h"
#include "clock.h"
#include "curl_ev.h"
#include "log.h"

#include <curl/curl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <assert.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define WEBHOOK_DEFAULT_CONNECT_TIMEOUT_MS 5000L
#define WEBHOOK_DEFAULT_TOTAL_TIMEOUT_MS 15000L
#define WEBHOOK_DEFAULT_MAX_RESPONSE_BYTES 1024
#define WEBHOOK_DEFAULT_MAX_INFLIGHT 512 /* as the delivery worker's default (delivery.c) */

/* Discarded response bytes after which a transfer is aborted. */
#define WEBHOOK_DISCARD_CAP (1024 * 1024)
/* Longest webhook-id accepted (notification keys are far shorter). */
#define WEBHOOK_MAX_ID_LEN 512
/* "v1," + base64 of a 32-byte HMAC-SHA256 + NUL. */
#define WEBHOOK_SIGNATURE_LEN CRIER_WEBHOOK_SIGNATURE_LEN
#define WEBHOOK_SECRET_PREFIX "whsec_"
#define WEBHOOK_USER_AGENT "crier/0.1"
/* The request headers: Content-Type, webhook-id, webhook-timestamp,
 * webhook-signature, Idempotency-Key and an empty Expect. */
#define WEBHOOK_HEADERS 6
/* Their text: names, the id twice, the timestamp and every signature. */
#define WEBHOOK_HEADER_TEXT_LEN (2 * WEBHOOK_MAX_ID_LEN + CRIER_WEBHOOK_SIGNATURES_LEN + 256)
/* A pooled transfer keeps a body buffer up to this size for the next request. */
#define WEBHOOK_KEEP_BODY_BYTES (64 * 1024)

typedef struct webhook_transfer webhook_transfer;

/* One request in flight, or an idle pooled easy handle ready for the next. */
struct webhook_transfer {
    crier_webhook_sender *sender;
    webhook_transfer *prev, *next; /* active list, or (next only) the idle pool */
    CURL *easy; /* its request-independent options set once (webhook_transfer_get) */
    /* The request's headers: a curl_slist built in place over header_text, so
     * that a request allocates nothing for them (CURLOPT_HTTPHEADER points at
     * headers[0] for the handle's life). */
    struct curl_slist headers[WEBHOOK_HEADERS];
    char header_text[WEBHOOK_HEADER_TEXT_LEN];
    char *body; /* the request body (CURLOPT_POSTFIELDS: curl reads it in place) */
    size_t body_cap;
    int64_t token;       /* handed back in the result */
    int64_t delivery_id; /* for the log */
    double start_ms;
    char *excerpt; /* max_response_bytes + 1, allocated once per pooled handle */
    size_t excerpt_len;
    size_t discarded;
    int capped;
    long retry_after_s;
    crier_curl_ev_guard guard; /* the SSRF guard's hook for this transfer */
    int guard_allowed;         /* sockets the guard let open */
    int guard_refused;         /* addresses the guard refused */
    char refused_msg[CRIER_TARGET_ERROR_LEN + 16]; /* "refused: " + the first refusal */
    char errbuf[CURL_ERROR_SIZE];
};

struct crier_webhook_sender {
    crier_curl_ev *curl;
    crier_webhook_options opts;
    crier_webhook_done_fn done;
    void *ud;
    int inflight;
    webhook_transfer *active; /* doubly linked */
    webhook_transfer *idle;   /* singly linked pool */
    int idle_count;
};

/* ---- signature ---------------------------------------------------------- */

/* crier_webhook_sign for a secret of secret_len bytes (not NUL-terminated). */
static int webhook_sign_n(const char *secret, size_t secret_len, const char *webhook_id,
                          int64_t timestamp, const char *body, size_t body_len, char *out,
                          size_t out_len)
{
    static const char prefix[] = WEBHOOK_SECRET_PREFIX;
    unsigned char *key = NULL;
    long key_len;
    unsigned char mac[EVP_MAX_MD_SIZE];
    size_t mac_len = 0;
    char ts[32];
    EVP_MAC *hmac = NULL;
    EVP_MAC_CTX *ctx = NULL;
    OSSL_PARAM params[2];
    char digest[] = "SHA256";
    int rc = -1;

    if (!secret || !webhook_id || (!body && body_len > 0) || !out ||
        out_len < WEBHOOK_SIGNATURE_LEN)
        return -1;
    if (secret_len >= sizeof prefix - 1 && strncmp(secret, prefix, sizeof prefix - 1) == 0) {
        const char *b64 = secret + sizeof prefix - 1;
        size_t b64_len = secret_len - (sizeof prefix - 1);

        key = malloc(3 * (b64_len + 3) / 4 + 1);
        if (!key)
            return -1;
        key_len = crier_base64_decode(b64, b64_len, key);
    } else {
        key_len = (long)secret_len;
        key = malloc((size_t)key_len + 1);
        if (!key)
            return -1;
        memcpy(key, secret, (size_t)key_len);
    }
    /* An empty key is a configuration mistake, not a signature. */
    if (key_len <= 0)
        goto out;

    snprintf(ts, sizeof ts, "%" PRId64, timestamp);
    hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!hmac)
        goto out;
    ctx = EVP_MAC_CTX_new(hmac);
    if (!ctx)
        goto out;
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0);
    params[1] = OSSL_PARAM_construct_end();
    if (!EVP_MAC_init(ctx, key, (size_t)key_len, params) ||
        !EVP_MAC_update(ctx, (const unsigned char *)webhook_id, strlen(webhook_id)) ||
        !EVP_MAC_update(ctx, (const unsigned char *)".", 1) ||
        !EVP_MAC_update(ctx, (const unsigned char *)ts, strlen(ts)) ||
        !EVP_MAC_update(ctx, (const unsigned char *)".", 1) ||
        (body_len > 0 && !EVP_MAC_update(ctx, (const unsigned char *)body, body_len)) ||
        !EVP_MAC_final(ctx, mac, &mac_len, sizeof mac) || mac_len != 32)
        goto out;
    memcpy(out, "v1,", 3);
    crier_base64_encode(mac, mac_len, out + 3); /* writes 44 + NUL */
    rc = 0;
out:
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(hmac);
    if (key) {
        OPENSSL_cleanse(key, key_len > 0 ? (size_t)key_len : 0);
        free(key);
    }
    OPENSSL_cleanse(mac, sizeof mac);
    return rc;
}

int crier_webhook_sign(const char *secret, const char *webhook_id, int64_t timestamp,
                       const char *body, size_t body_len, char *out, size_t out_len)
{
    if (!secret)
        return -1;
    return webhook_sign_n(secret, strlen(secret), webhook_id, timestamp, body, body_len, out,
                          out_len);
}

int crier_webhook_sign_all(const char *secrets, const char *webhook_id, int64_t timestamp,
                           const char *body, size_t body_len, char *out, size_t out_len,
                           int *bad_index)
{
    static const char prefix[] = WEBHOOK_SECRET_PREFIX;
    const char *p;
    size_t used = 0;
    int count = 0;

    if (bad_index)
        *bad_index = 0;
    if (!secrets || !out || out_len == 0)
        return -1;
    out[0] = '\0';
    for (p = secrets; isspace((unsigned char)*p); p++)
        ;
    /* Not a whsec_ list: one raw key, exactly as given (whitespace included). */
    if (strncmp(p, prefix, sizeof prefix - 1) != 0) {
        if (out_len < WEBHOOK_SIGNATURE_LEN)
            return -1;
        if (webhook_sign_n(secrets, strlen(secrets), webhook_id, timestamp, body, body_len, out,
                           out_len) != 0) {
            if (bad_index)
                *bad_index = 1;
            return -1;
        }
        return 1;
    }
    while (*p) {
        const char *end = p;
        size_t sep = count > 0 ? 1 : 0;

        while (*end && !isspace((unsigned char)*end))
            end++;
        if (count == CRIER_WEBHOOK_MAX_SECRETS || used + sep + WEBHOOK_SIGNATURE_LEN > out_len)
            goto fail; /* bad_index stays 0: the list, not one secret */
        /* Every entry of a list must be a whsec_ secret with a usable key. */
        if ((size_t)(end - p) < sizeof prefix - 1 || strncmp(p, prefix, sizeof prefix - 1) != 0 ||
            webhook_sign_n(p, (size_t)(end - p), webhook_id, timestamp, body, body_len,
                           out + used + sep, out_len - used - sep) != 0) {
            if (bad_index)
                *bad_index = count + 1;
            goto fail;
        }
        if (sep)
            out[used] = ' ';
        used += sep + WEBHOOK_SIGNATURE_LEN - 1;
        count++;
        for (p = end; isspace((unsigned char)*p); p++)
            ;
    }
    return count;
fail:
    out[0] = '\0';
    return -1;
}

/* ---- request validation ------------------------------------------------- */

/* True when s has no control characters (CR, LF, NUL-free by construction,
 * other C0 bytes, DEL) and, if no_space, no spaces either. */
static int webhook_is_header_safe(const char *s, int no_space)
{
    const unsigned char *p;

    for (p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            return 0;
        if (no_space && *p == ' ')
            return 0;
    }
    return 1;
}

static int webhook_check_request(const crier_webhook_request *req)
{
    size_t id_len;

    if (!req || !req->url || !req->webhook_id || (!req->body && req->body_len > 0)) {
        crier_warn("webhook", "refused request: missing url, webhook_id or body");
        return -1;
    }
    if (strncasecmp(req->url, "http://", 7) != 0 && strncasecmp(req->url, "https://", 8) != 0) {
        crier_warn("webhook", "refused delivery %" PRId64 ": url is not http(s)", req->delivery_id);
        return -1;
    }
    if (!webhook_is_header_safe(req->url, 1)) {
        crier_warn("webhook", "refused delivery %" PRId64 ": control character in url",
                   req->delivery_id);
        return -1;
    }
    id_len = strlen(req->webhook_id);
    if (id_len == 0 || id_len > WEBHOOK_MAX_ID_LEN || !webhook_is_header_safe(req->webhook_id, 0)) {
        crier_warn("webhook",
                   "refused delivery %" PRId64 ": empty, overlong or control "
                   "character in webhook_id",
                   req->delivery_id);
        return -1;
    }
    return 0;
}

/* ---- curl callbacks ----------------------------------------------------- */

static size_t webhook_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    webhook_transfer *t = userp;
    size_t n = size * nmemb;
    size_t room = t->sender->opts.max_response_bytes - t->excerpt_len;
    size_t keep = n < room ? n : room;

    memcpy(t->excerpt + t->excerpt_len, data, keep);
    t->excerpt_len += keep;
    t->discarded += n - keep;
    if (t->discarded > WEBHOOK_DISCARD_CAP) {
        t->capped = 1;
        return 0; /* aborts with CURLE_WRITE_ERROR */
    }
    return n;
}

/* Parses a Retry-After value: delay seconds or an HTTP-date. -1 if unusable. */
static long webhook_parse_retry_after(const char *v, size_t len)
{
    char buf[128];
    size_t i;

    while (len > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        len--;
    }
    while (len > 0 && isspace((unsigned char)v[len - 1]))
        len--;
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, v, len);
    buf[len] = '\0';
    for (i = 0; i < len && isdigit((unsigned char)buf[i]); i++)
        ;
    if (i == len) {
        long secs = 0;
        for (i = 0; i < len; i++) {
            if (secs > 100000000L) /* clamp absurd values (about three years) */
                return 100000000L;
            secs = secs * 10 + (buf[i] - '0');
        }
        return secs;
    } else {
        time_t when = curl_getdate(buf, NULL);
        time_t now = time(NULL);
        if (when == (time_t)-1)
            return -1;
        return when > now ? (long)(when - now) : 0;
    }
}

static size_t webhook_header_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    static const char name[] = "retry-after:";
    webhook_transfer *t = userp;
    size_t n = size * nmemb;

    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0)
        t->retry_after_s = -1; /* a new response (after 1xx) starts afresh */
    else if (n > sizeof name - 1 && strncasecmp(data, name, sizeof name - 1) == 0)
        t->retry_after_s = webhook_parse_retry_after(data + sizeof name - 1, n - (sizeof name - 1));
    return n;
}

/* ---- transfers ---------------------------------------------------------- */

static void webhook_transfer_free(webhook_transfer *t)
{
    if (!t)
        return;
    if (t->easy)
        curl_easy_cleanup(t->easy);
    free(t->body);
    free(t->excerpt);
    free(t);
}

/* Sets the options every request of s shares on a new easy handle, once for
 * its life in the pool: a request then sets only its url and body (before, a
 * reset and some twenty options per request, several of them copied strings). */
static int webhook_easy_init(crier_webhook_sender *s, webhook_transfer *t)
{
    CURL *e = t->easy;
    CURLcode rc;

#define WEBHOOK_SETOPT(opt, val)                                                                   \
    do {                                                                                           \
        rc = curl_easy_setopt(e, opt, val);                                                        \
        if (rc != CURLE_OK)                                                                        \
            goto fail;                                                                              \
    } while (0)

    WEBHOOK_SETOPT(CURLOPT_PRIVATE, t);
    WEBHOOK_SETOPT(CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85.0 */
    WEBHOOK_SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
    WEBHOOK_SETOPT(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    WEBHOOK_SETOPT(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    WEBHOOK_SETOPT(CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    /* Never follow redirects: a 3xx is the receiver's answer, and following
     * one would be a second, unchecked request. */
    WEBHOOK_SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
    /* No proxy from the environment (http_proxy, …): the guard must see the
     * target's own address, not a proxy's. */
    WEBHOOK_SETOPT(CURLOPT_PROXY, "");
    WEBHOOK_SETOPT(CURLOPT_CONNECTTIMEOUT_MS, s->opts.connect_timeout_ms);
    WEBHOOK_SETOPT(CURLOPT_TIMEOUT_MS, s->opts.total_timeout_ms);
    WEBHOOK_SETOPT(CURLOPT_USERAGENT, WEBHOOK_USER_AGENT);
    WEBHOOK_SETOPT(CURLOPT_HTTPHEADER, t->headers);
    WEBHOOK_SETOPT(CURLOPT_POST, 1L);
    WEBHOOK_SETOPT(CURLOPT_WRITEFUNCTION, webhook_write_cb);
    WEBHOOK_SETOPT(CURLOPT_WRITEDATA, t);
    WEBHOOK_SETOPT(CURLOPT_HEADERFUNCTION, webhook_header_cb);
    WEBHOOK_SETOPT(CURLOPT_HEADERDATA, t);
    WEBHOOK_SETOPT(CURLOPT_ERRORBUFFER, t->errbuf);
    WEBHOOK_SETOPT(CURLOPT_TCP_NODELAY, 1L);
    /* HTTP/1.1, also to receivers that offer HTTP/2: with the libcurl of
     * Debian 12 (7.88.1) on the multi socket interface, 2 of 5 bursts of 3,000
     * webhooks to an HTTP/2 nginx left 7-34 answered streams unread until
     * their 15-s timeout (docs/BENCHMARKS.md, bench deliver, twenty-second
     * session); kept-alive HTTP/1.1 connections never stalled. */
    WEBHOOK_SETOPT(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    if ((rc = crier_curl_ev_set_trust(e, s->opts.ca_file)) != CURLE_OK)
        goto fail;
    return 0;
fail:
    crier_warn("webhook", "cannot set up a libcurl handle: %s", curl_easy_strerror(rc));
    return -1;
#undef WEBHOOK_SETOPT
}

/* Takes an idle transfer from the pool or makes one. */
static webhook_transfer *webhook_transfer_get(crier_webhook_sender *s)
{
    webhook_transfer *t = s->idle;

    if (t) {
        s->idle = t->next;
        s->idle_count--;
    } else {
        t = calloc(1, sizeof *t);
        if (!t)
            goto fail;
        t->sender = s;
        t->easy = curl_easy_init();
        t->excerpt = malloc(s->opts.max_response_bytes + 1);
        if (!t->easy || !t->excerpt || webhook_easy_init(s, t) != 0)
            goto fail;
    }
    t->prev = t->next = NULL;
    t->excerpt_len = 0;
    t->excerpt[0] = '\0';
    t->discarded = 0;
    t->capped = 0;
    t->retry_after_s = -1;
    t->guard_allowed = 0;
    t->guard_refused = 0;
    t->refused_msg[0] = '\0';
    t->errbuf[0] = '\0';
    return t;
fail:
    webhook_transfer_free(t);
    return NULL;
}

/* Returns a finished (or never started) transfer to the pool; its easy handle
 * keeps its options, and connections stay cached in the multi handle. */
static void webhook_transfer_put(crier_webhook_sender *s, webhook_transfer *t)
{
    if (crier_curl_ev_closing(s->curl) || s->idle_count >= s->opts.max_inflight) {
        webhook_transfer_free(t);
        return;
    }
    if (t->body_cap > WEBHOOK_KEEP_BODY_BYTES) {
        free(t->body);
        t->body = NULL;
        t->body_cap = 0;
    }
    t->prev = NULL;
    t->next = s->idle;
    s->idle = t;
    s->idle_count++;
}

static void webhook_active_unlink(crier_webhook_sender *s, webhook_transfer *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        s->active = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
}

/* Appends the header "name: value" (value NULL: name as it is) to t->headers,
 * its text in header_text from *used on. Returns 0, or -1 when it does not fit. */
static int webhook_add_header(webhook_transfer *t, int *count, size_t *used, const char *name,
                              const char *value)
{
    char *at = t->header_text + *used;
    size_t room = sizeof t->header_text - *used;
    int n = value ? snprintf(at, room, "%s: %s", name, value) : snprintf(at, room, "%s", name);

    if (*count == WEBHOOK_HEADERS || n < 0 || (size_t)n >= room)
        return -1;
    t->headers[*count].data = at;
    t->headers[*count].next = NULL;
    if (*count > 0)
        t->headers[*count - 1].next = &t->headers[*count];
    (*count)++;
    *used += (size_t)n + 1;
    return 0;
}

/* Sets one request's headers, url and body on t's easy handle. */
static int webhook_transfer_setup(webhook_transfer *t, const crier_webhook_request *req,
                                  int64_t timestamp, const char *signature)
{
    char ts[32];
    int count = 0;
    size_t used = 0;
    CURLcode rc;

    snprintf(ts, sizeof ts, "%" PRId64, timestamp);
    if (webhook_add_header(t, &count, &used, "Content-Type", "application/json") ||
        webhook_add_header(t, &count, &used, "webhook-id", req->webhook_id) ||
        webhook_add_header(t, &count, &used, "webhook-timestamp", ts) ||
        (signature && webhook_add_header(t, &count, &used, "webhook-signature", signature)) ||
        webhook_add_header(t, &count, &used, "Idempotency-Key", req->webhook_id) ||
        /* No "Expect: 100-continue" round trip for larger bodies. */
        webhook_add_header(t, &count, &used, "Expect:", NULL)) {
        crier_warn("webhook", "delivery %" PRId64 ": headers too long", req->delivery_id);
        return -1;
    }
    if (req->body_len + 1 > t->body_cap) {
        char *body = realloc(t->body, req->body_len + 1);

        if (!body) {
            crier_warn("webhook", "out of memory for a body of %zu bytes", req->body_len);
            return -1;
        }
        t->body = body;
        t->body_cap = req->body_len + 1;
    }
    if (req->body_len > 0)
        memcpy(t->body, req->body, req->body_len);
    t->body[req->body_len] = '\0';
    if ((rc = curl_easy_setopt(t->easy, CURLOPT_URL, req->url)) != CURLE_OK ||
        (rc = curl_easy_setopt(t->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len)) != CURLE_OK ||
        (rc = curl_easy_setopt(t->easy, CURLOPT_POSTFIELDS, t->body)) != CURLE_OK) {
        crier_warn("webhook", "delivery %" PRId64 ": curl_easy_setopt failed: %s", req->delivery_id,
                   curl_easy_strerror(rc));
        return -1;
    }
    return 0;
}

/* crier_curl_ev_guard_fn: lets a socket open only to an address the sender's
 * allow_targets permits; remembers the first refusal for the result. */
static bool webhook_guard_cb(void *ud, const struct sockaddr *addr, socklen_t addr_len)
{
    webhook_transfer *t = ud;
    char why[CRIER_TARGET_ERROR_LEN];

    if (crier_target_check(addr, addr_len, t->sender->opts.allow_targets, why, sizeof why) == 0) {
        t->guard_allowed++;
        return true;
    }
    if (t->guard_refused++ == 0)
        snprintf(t->refused_msg, sizeof t->refused_msg, "refused: %s", why);
    return false;
}

/* crier_curl_ev_done_fn: completes one transfer — builds the result, calls
 * done, pools the handle. */
static void webhook_curl_done(void *ud, CURL *easy, CURLcode code)
{
    crier_webhook_sender *s = ud;
    webhook_transfer *t = NULL;
    crier_webhook_result r;
    long status = 0;

    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
    assert(t != NULL);
    webhook_active_unlink(s, t);
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);

    memset(&r, 0, sizeof r);
    r.token = t->token;
    t->excerpt[t->excerpt_len] = '\0';
    r.response_excerpt = t->excerpt;
    r.duration_ms = crier_clock_ms() - t->start_ms;
    r.retry_after_s = t->retry_after_s;
    if (code == CURLE_OK || status >= 200) {
        /* A final status line is the receiver's answer, even when the body
         * then failed (too large, cut off, timed out). */
        r.http_status = status;
        if (code != CURLE_OK)
            crier_debug("webhook", "delivery %" PRId64 ": status %ld, body incomplete: %s",
                        t->delivery_id, status,
                        t->capped ? "response too large" : curl_easy_strerror(code));
    } else if (t->guard_refused > 0 && t->guard_allowed == 0) {
        /* Every address tried was refused: no socket was opened. */
        r.http_status = 0;
        r.error = t->refused_msg;
        r.refused = 1;
        r.retry_after_s = -1;
        crier_warn("webhook", "delivery %" PRId64 " %s", t->delivery_id, t->refused_msg);
    } else {
        r.http_status = 0;
        r.error = t->errbuf[0] ? t->errbuf : curl_easy_strerror(code);
        r.timed_out = code == CURLE_OPERATION_TIMEDOUT;
        r.retry_after_s = -1;
    }
    s->inflight--;
    s->done(s->ud, &r);
    webhook_transfer_put(s, t);
}

static void webhook_sender_destroy(void *ud);

/* ---- public API --------------------------------------------------------- */

crier_webhook_sender *crier_webhook_sender_new(struct ev_loop *loop,
                                               const crier_webhook_options *opts,
                                               crier_webhook_done_fn done, void *ud)
{
    crier_webhook_sender *s;

    if (!loop || !done) {
        crier_warn("webhook", "sender needs a loop and a done callback");
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        goto fail;
    s->done = done;
    s->ud = ud;
    if (opts)
        s->opts = *opts;
    /* Zero (or negative) fields mean "default", so a zeroed struct works. */
    if (s->opts.connect_timeout_ms <= 0)
        s->opts.connect_timeout_ms = WEBHOOK_DEFAULT_CONNECT_TIMEOUT_MS;
    if (s->opts.total_timeout_ms <= 0)
        s->opts.total_timeout_ms = WEBHOOK_DEFAULT_TOTAL_TIMEOUT_MS;
    if (s->opts.max_response_bytes == 0)
        s->opts.max_response_bytes = WEBHOOK_DEFAULT_MAX_RESPONSE_BYTES;
    if (s->opts.max_inflight <= 0)
        s->opts.max_inflight = WEBHOOK_DEFAULT_MAX_INFLIGHT;
    if (s->opts.max_body_bytes == 0)
        s->opts.max_body_bytes = CRIER_WEBHOOK_DEFAULT_MAX_BODY_BYTES;

    s->curl = crier_curl_ev_new(loop, (long)s->opts.max_inflight, "webhook", webhook_curl_done,
                                webhook_sender_destroy, s);
    if (!s->curl)
        goto fail;
    return s;
fail:
    crier_warn("webhook", "could not create the webhook sender");
    free(s);
    return NULL;
}

int crier_webhook_send(crier_webhook_sender *s, const crier_webhook_request *req)
{
    webhook_transfer *t = NULL;
    char signature[CRIER_WEBHOOK_SIGNATURES_LEN];
    int64_t timestamp;
    int bad = 0;

    if (!s || crier_curl_ev_closing(s->curl) || webhook_check_request(req) != 0)
        return -1;
    if (s->inflight >= s->opts.max_inflight)
        return -1;
    if (req->body_len > s->opts.max_body_bytes) {
        crier_warn("webhook", "refused delivery %" PRId64 ": body is %zu bytes, over the limit of %zu",
                   req->delivery_id, req->body_len, s->opts.max_body_bytes);
        return -1;
    }
    timestamp = req->timestamp ? req->timestamp : (int64_t)time(NULL);
    if (req->secret && crier_webhook_sign_all(req->secret, req->webhook_id, timestamp, req->body,
                                              req->body_len, signature, sizeof signature, &bad) < 0) {
        if (bad > 0)
            crier_warn("webhook",
                       "refused delivery %" PRId64 ": secret %d of the list is not usable "
                       "(not a whsec_ secret with a non-empty base64 key)",
                       req->delivery_id, bad);
        else
            crier_warn("webhook", "refused delivery %" PRId64 ": more than %d secrets",
                       req->delivery_id, CRIER_WEBHOOK_MAX_SECRETS);
        return -1;
    }
    t = webhook_transfer_get(s);
    if (!t) {
        crier_warn("webhook", "out of memory for a transfer");
        return -1;
    }
    t->token = req->token;
    t->delivery_id = req->delivery_id;
    if (webhook_transfer_setup(t, req, timestamp, req->secret ? signature : NULL) != 0)
        goto fail;
    t->start_ms = crier_clock_ms();
    t->guard.check = webhook_guard_cb;
    t->guard.ud = t;
    if (crier_curl_ev_add_guarded(s->curl, t->easy, &t->guard) != 0) {
        crier_warn("webhook", "delivery %" PRId64 ": libcurl refused the transfer", req->delivery_id);
        goto fail;
    }
    t->next = s->active;
    if (s->active)
        s->active->prev = t;
    s->active = t;
    s->inflight++;
    return 0;
fail:
    webhook_transfer_put(s, t);
    return -1;
}

int crier_webhook_inflight(const crier_webhook_sender *s)
{
    return s ? s->inflight : 0;
}

/* crier_curl_ev_destroy_fn: frees the transfers in flight and pooled, and the
 * sender (the driver closes the connections afterwards). */
static void webhook_sender_destroy(void *ud)
{
    crier_webhook_sender *s = ud;
    webhook_transfer *t, *next;

    for (t = s->active; t; t = next) {
        next = t->next;
        crier_curl_ev_remove(s->curl, t->easy);
        webhook_transfer_free(t);
    }
    for (t = s->idle; t; t = next) {
        next = t->next;
        webhook_transfer_free(t);
    }
    free(s);
}

void crier_webhook_sender_free(crier_webhook_sender *s)
{
    if (s)
        crier_curl_ev_close(s->curl);
}
