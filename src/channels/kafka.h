/* kafka.h — the Kafka channel's sender: publishes one message per delivery
 * through librdkafka's idempotent producer (enable.idempotence=true, acks=all),
 * driven by a libev loop (an eventfd that librdkafka signals when its main
 * queue fills, plus a safety-net timer; never a blocking poll on the loop).
 * The message key and the "idempotency-key" header are the notification key,
 * so consumers can dedupe the rare redelivery after an ambiguous failure.
 * librdkafka's own retries inside one send (leader moves, request timeouts,
 * dropped connections) keep the producer id and sequence numbers, and the
 * broker drops a batch it already stored by them: a second copy of a key comes
 * only from sending it again after a possibly_delivered result, or through a
 * new producer after a fatal error. (librdkafka's mock cluster checks sequence
 * numbers for transactional producers only, so it does store such retries
 * twice: see tests/unit/test_kafka.c.)
 *
 * Layer: channels (src/channels/), may use base.
 * Calls into: clock (base), log (base).
 */
#ifndef CRIER_KAFKA_H
#define CRIER_KAFKA_H

#include <stddef.h>
#include <stdint.h>

struct ev_loop;

typedef struct crier_kafka_sender crier_kafka_sender;

typedef struct {
    const char *bootstrap_servers; /* "host:port,host:port" (required) */
    /* Extra librdkafka properties as "name=value" strings, applied in order
     * (e.g. "security.protocol=ssl", "compression.type=lz4",
     * "message.max.bytes=2000000"). enable.idempotence, acks and
     * message.timeout.ms are set by the sender and cannot be overridden here;
     * an entry touching them is refused (sender_new returns NULL). */
    const char *const *config;
    size_t config_count;
    int message_timeout_ms; /* delivery deadline incl. internal retries; default 30000 */
    int max_inflight;       /* accepted, unreported messages; default 10000 */
    int close_timeout_ms;   /* bounded flush in sender_free; default 2000 */
} crier_kafka_options;

/* One extra message header. Both strings are copied by crier_kafka_send. */
typedef struct {
    const char *name;  /* non-empty, no control characters, not "idempotency-key" */
    const char *value; /* NUL-terminated; sent without the NUL */
} crier_kafka_header;

/* One request. Everything is copied by crier_kafka_send; the caller keeps
 * ownership of its own buffers. */
typedef struct {
    int64_t token;        /* opaque to the sender: handed back in the result */
    int64_t delivery_id;  /* the delivery's id (crier.deliveries.id), for the log only */
    const char *topic;    /* 1..249 of [A-Za-z0-9._-], not "." or ".." */
    const char *key;      /* the notification key ("msg_…"): message key and
                             idempotency-key header; no control characters */
    const char *payload;  /* message value (JSON, usually) */
    size_t payload_len;
    const crier_kafka_header *headers; /* optional extra headers (may be NULL) */
    size_t header_count;               /* at most 16 */
} crier_kafka_request;

/* The outcome of one request, passed to the completion callback. The pointers
 * are valid only during the callback. */
typedef struct {
    int64_t token; /* the request's token */
    const char *error;      /* NULL on success; else librdkafka's message */
    int error_code;         /* rd_kafka_resp_err_t; 0 on success */
    int retriable;          /* on error: 1 = try again later, 0 = permanent
                               (too large, unknown topic, invalid, not authorized) */
    int possibly_delivered; /* on error: 1 when the broker may have stored the
                               message (a timeout): a retry may duplicate it, which
                               the key lets consumers dedupe */
    int fatal;              /* 1 once the producer hit a fatal error (see
                               crier_kafka_fatal_error): recreate the sender
                               (the delivery worker does, through its
                               senders' kafka_renew) */
    int32_t partition;      /* on success; -1 otherwise */
    int64_t offset;         /* on success, or -1 when the broker acknowledged
                               without naming one (a retried batch it already
                               had: acknowledged as a duplicate, or implicitly
                               by the success of a later batch); -1 on error */
    double duration_ms;     /* from send to the delivery report */
} crier_kafka_result;

typedef void (*crier_kafka_done_fn)(void *ud, const crier_kafka_result *result);

/* Creates a producer on loop. opts->bootstrap_servers is required; zero (or
 * negative) numeric fields mean the default. done is called exactly once per
 * accepted request, from the loop, never from inside crier_kafka_send.
 * Connecting is lazy: an unreachable cluster does not fail here, it makes
 * deliveries time out after message_timeout_ms (retriable results).
 * Returns NULL on failure (bad options or config; logged). */
crier_kafka_sender *crier_kafka_sender_new(struct ev_loop *loop, const crier_kafka_options *opts,
                                           crier_kafka_done_fn done, void *ud);

/* Queues a message. Returns 0 if accepted (done will be called, possibly with
 * an error such as "message too large" or the producer's fatal error), or -1
 * if refused: the sender is full (check crier_kafka_inflight first), closing,
 * or the request is bad (empty or illegal topic, empty key or one with control
 * characters, bad header). Nothing is sent for a refused request. */
int crier_kafka_send(crier_kafka_sender *s, const crier_kafka_request *req);

/* Number of accepted requests whose done callback has not run yet. */
int crier_kafka_inflight(const crier_kafka_sender *s);

/* The producer's fatal error ("<error name>: <reason>") or NULL. A fatal error
 * (for example the broker fencing the idempotent producer, or a sequence gap it
 * cannot repair) is permanent for this producer: every later result has fatal
 * set and fails. The caller should stop sending, let in-flight results arrive,
 * free the sender and create a new one; deliveries that failed with fatal set
 * are retriable and go to the new producer (a new producer id, so a message
 * whose earlier attempt was possibly_delivered may appear twice with the same
 * key). The string belongs to the sender. */
const char *crier_kafka_fatal_error(const crier_kafka_sender *s);

/* Frees the sender. It first waits up to close_timeout_ms (default 2000 ms;
 * this blocks the calling thread) for messages still in flight to be
 * acknowledged, then purges the rest and destroys the producer. done is never
 * called once free begins, even for messages acknowledged during the flush, so
 * a clean shutdown stops sending and runs the loop until crier_kafka_inflight
 * is 0 before freeing; otherwise the unreported deliveries are sent again after
 * their lease expires (same key). May be called from inside a done callback
 * (the producer is destroyed once dispatch unwinds). NULL is a no-op. */
void crier_kafka_sender_free(crier_kafka_sender *s);

/* For tests: makes the producer raise a fabricated fatal error (as
 * rd_kafka_test_fatal_error). Returns 0, or -1 if one was already raised. */
int crier_kafka_test_fatal(crier_kafka_sender *s);

#endif
