/* webhook.h — the webhook channel's sender: HTTP POSTs through libcurl's multi
 * interface, driven by a libev loop (socket and timer callbacks; never
 * curl_easy_perform), signed per Standard Webhooks (webhook-id,
 * webhook-timestamp, webhook-signature: v1,<base64 HMAC-SHA256 of "id.ts.body">,
 * one per secret while a secret is rotated). Only http and https, no
 * redirects, and every address it connects to passes the SSRF guard
 * (target_guard.h) unless allow_targets opens it.
 *
 * Layer: channels (src/channels/), may use base.
 * Calls into: base64 (base), clock (base), curl_ev, log (base), target_guard.
 */
#ifndef CRIER_WEBHOOK_H
#define CRIER_WEBHOOK_H

#include "target_guard.h"

#include <stddef.h>
#include <stdint.h>

/* Secrets one request may carry (space-separated in crier_webhook_request.secret). */
#define CRIER_WEBHOOK_MAX_SECRETS 8
/* Bytes of one "v1,<base64>" signature, NUL included. */
#define CRIER_WEBHOOK_SIGNATURE_LEN (3 + 44 + 1)
/* Bytes of the longest webhook-signature value, NUL included. */
#define CRIER_WEBHOOK_SIGNATURES_LEN (CRIER_WEBHOOK_MAX_SECRETS * CRIER_WEBHOOK_SIGNATURE_LEN)
/* Default of crier_webhook_options.max_body_bytes (1 MiB). */
#define CRIER_WEBHOOK_DEFAULT_MAX_BODY_BYTES (1024 * 1024)

struct ev_loop;

typedef struct crier_webhook_sender crier_webhook_sender;

typedef struct {
    long connect_timeout_ms; /* default 5000 */
    long total_timeout_ms;   /* default 15000 */
    size_t max_response_bytes; /* response bytes kept for the excerpt; default 1024 */
    int max_inflight;        /* concurrent transfers; default 512 */
    /* Non-public addresses the sender may connect to: an OR of
     * CRIER_TARGET_ALLOW_LOOPBACK, _PRIVATE, _LINK_LOCAL (target_guard.h).
     * 0 = public addresses only. Checked at connect time on every address
     * curl resolves (so DNS rebinding is caught too); special-purpose
     * addresses (0.0.0.0, multicast, …) are never allowed. */
    unsigned allow_targets;
    /* Largest request body sent; a larger one is refused by
     * crier_webhook_send (-1, logged with size and limit). 0 = default,
     * CRIER_WEBHOOK_DEFAULT_MAX_BODY_BYTES (1 MiB). */
    size_t max_body_bytes;
    /* PEM CA certificates that https receivers' certificates are verified
     * against; NULL: libcurl's default bundle (crier_curl_ev_set_trust). */
    const char *ca_file;
} crier_webhook_options;

/* One request. All strings are copied by crier_webhook_send; the caller keeps
 * ownership of its own buffers. */
typedef struct {
    int64_t token;     /* opaque to the sender: handed back in the result */
    int64_t delivery_id; /* the delivery's id (crier.deliveries.id), for the log only */
    const char *url;         /* http:// or https:// */
    const char *body;        /* JSON body */
    size_t body_len;
    const char *webhook_id;  /* the notification key: webhook-id and Idempotency-Key headers */
    /* "whsec_<base64>", or while a secret is rotated several of them
     * separated by whitespace ("whsec_new whsec_old"): webhook-signature then
     * carries one "v1,<base64>" per secret, space-separated, in this order.
     * At most CRIER_WEBHOOK_MAX_SECRETS; any secret that is not valid base64
     * after "whsec_" (or empty) makes crier_webhook_send refuse the request
     * (the log names its position, never its value). A string that does not
     * start with "whsec_" is one raw key, used as is. NULL: no signature. */
    const char *secret;
    int64_t timestamp;       /* unix seconds for webhook-timestamp; 0 = now */
} crier_webhook_request;

/* The outcome of one request, passed to the completion callback. The pointers
 * are valid only during the callback. */
typedef struct {
    int64_t token; /* the request's token */
    long http_status;        /* 0 when no HTTP response arrived */
    const char *error;       /* NULL on an HTTP response; else curl's message (timeout,
                                connection refused, …) or the guard's refusal */
    int timed_out;           /* 1 when the failure was a timeout (ambiguous: may have arrived) */
    const char *response_excerpt; /* first max_response_bytes of the body, NUL-terminated */
    double duration_ms;
    long retry_after_s;      /* parsed Retry-After header in seconds, -1 if absent */
    /* 1 when the SSRF guard refused every address of the url: nothing was
     * sent (not a byte, no socket opened). Permanent: retrying cannot help
     * until the operator changes --allow-targets. error then reads e.g.
     * "refused: 127.0.0.1 is a loopback address; allow it with
     * --allow-targets loopback". */
    int refused;
} crier_webhook_result;

typedef void (*crier_webhook_done_fn)(void *ud, const crier_webhook_result *result);

/* Creates a sender on loop. opts may be NULL for defaults. done is called once
 * per accepted request, from the loop. Returns NULL on failure (logged). */
crier_webhook_sender *crier_webhook_sender_new(struct ev_loop *loop,
                                               const crier_webhook_options *opts,
                                               crier_webhook_done_fn done, void *ud);

/* Queues a request. Returns 0 if accepted (done will be called), -1 if refused
 * (sender full: check crier_webhook_inflight first; bad arguments; an unusable
 * secret; a body over max_body_bytes). A target address refused by the guard
 * is reported later, through done with refused = 1. */
int crier_webhook_send(crier_webhook_sender *s, const crier_webhook_request *req);

/* Number of accepted requests whose done callback has not run yet. */
int crier_webhook_inflight(const crier_webhook_sender *s);

/* Aborts all transfers without calling done, and frees the sender. NULL is a no-op. */
void crier_webhook_sender_free(crier_webhook_sender *s);

/* Computes the Standard Webhooks signature "v1,<base64>" for (id, timestamp,
 * body) with secret "whsec_<base64 key>" (a secret without the prefix is used as
 * raw bytes). Writes a NUL-terminated string into out. Returns 0, or -1 if the
 * secret is not valid base64 or out is too small (needs
 * CRIER_WEBHOOK_SIGNATURE_LEN bytes). */
int crier_webhook_sign(const char *secret, const char *webhook_id, int64_t timestamp,
                       const char *body, size_t body_len, char *out, size_t out_len);

/* Computes the whole webhook-signature value for secrets, a secret list as in
 * crier_webhook_request.secret: one "v1,<base64>" per secret, separated by
 * single spaces, in order. Writes a NUL-terminated string into out
 * (CRIER_WEBHOOK_SIGNATURES_LEN bytes always suffice). Returns the number of
 * signatures written, or -1: then *bad_index (if not NULL) is the 1-based
 * position of the unusable secret, or 0 when the list itself is the problem
 * (NULL, more than CRIER_WEBHOOK_MAX_SECRETS, out too small). */
int crier_webhook_sign_all(const char *secrets, const char *webhook_id, int64_t timestamp,
                           const char *body, size_t body_len, char *out, size_t out_len,
                           int *bad_index);

#endif
