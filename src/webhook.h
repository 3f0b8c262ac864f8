/* webhook.h — the webhook channel's sender: HTTP POSTs through libcurl's multi
 * interface, driven by a libev loop (socket and timer callbacks; never
 * curl_easy_perform), signed per Standard Webhooks (webhook-id,
 * webhook-timestamp, webhook-signature: v1,<base64 HMAC-SHA256 of "id.ts.body">). */
#ifndef CRIER_WEBHOOK_H
#define CRIER_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>

struct ev_loop;

typedef struct crier_webhook_sender crier_webhook_sender;

typedef struct {
    long connect_timeout_ms; /* default 5000 */
    long total_timeout_ms;   /* default 15000 */
    size_t max_response_bytes; /* response bytes kept for the excerpt; default 1024 */
    int max_inflight;        /* concurrent transfers; default 256 */
} crier_webhook_options;

/* One request. All strings are copied by crier_webhook_send; the caller keeps
 * ownership of its own buffers. */
typedef struct {
    int64_t delivery_id;     /* opaque to the sender: handed back in the result */
    const char *url;         /* http:// or https:// */
    const char *body;        /* JSON body */
    size_t body_len;
    const char *webhook_id;  /* the notification key: webhook-id and Idempotency-Key headers */
    const char *secret;      /* "whsec_<base64>" (or NULL: no signature header) */
    int64_t timestamp;       /* unix seconds for webhook-timestamp; 0 = now */
} crier_webhook_request;

/* The outcome of one request, passed to the completion callback. The pointers
 * are valid only during the callback. */
typedef struct {
    int64_t delivery_id;
    long http_status;        /* 0 when no HTTP response arrived */
    const char *error;       /* NULL on an HTTP response; else curl's message (timeout, refused, …) */
    int timed_out;           /* 1 when the failure was a timeout (ambiguous: may have arrived) */
    const char *response_excerpt; /* first max_response_bytes of the body, NUL-terminated */
    double duration_ms;
    long retry_after_s;      /* parsed Retry-After header in seconds, -1 if absent */
} crier_webhook_result;

typedef void (*crier_webhook_done_fn)(void *ud, const crier_webhook_result *result);

/* Creates a sender on loop. opts may be NULL for defaults. done is called once
 * per accepted request, from the loop. Returns NULL on failure (logged). */
crier_webhook_sender *crier_webhook_sender_new(struct ev_loop *loop,
                                               const crier_webhook_options *opts,
                                               crier_webhook_done_fn done, void *ud);

/* Queues a request. Returns 0 if accepted (done will be called), -1 if refused
 * (sender full: check crier_webhook_inflight first; or bad arguments). */
int crier_webhook_send(crier_webhook_sender *s, const crier_webhook_request *req);

/* Number of accepted requests whose done callback has not run yet. */
int crier_webhook_inflight(const crier_webhook_sender *s);

/* Aborts all transfers without calling done, and frees the sender. NULL is a no-op. */
void crier_webhook_sender_free(crier_webhook_sender *s);

/* Computes the Standard Webhooks signature "v1,<base64>" for (id, timestamp,
 * body) with secret "whsec_<base64 key>" (a secret without the prefix is used as
 * raw bytes). Writes a NUL-terminated string into out. Returns 0, or -1 if the
 * secret is not valid base64 or out is too small (needs 64 bytes). */
int crier_webhook_sign(const char *secret, const char *webhook_id, int64_t timestamp,
                       const char *body, size_t body_len, char *out, size_t out_len);

#endif
