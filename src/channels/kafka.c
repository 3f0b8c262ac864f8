/* kafka.c — the Kafka channel's sender: one librdkafka idempotent producer
 * (enable.idempotence=true, acks=all) driven by a libev loop without ever
 * blocking it. librdkafka's main queue (delivery reports, errors, and its log
 * lines, forwarded there with log.queue) writes to an eventfd whenever it
 * becomes non-empty (rd_kafka_queue_io_event_enable); an ev_io on that eventfd
 * serves it with rd_kafka_poll(rk, 0). A repeating ev_timer, active while
 * messages are in flight, polls too, as a safety net against a missed wakeup.
 *
 * Delivery reports drive the done callback, exactly once per accepted request.
 * A request that librdkafka refuses synchronously for a reason tied to the
 * message (too large, the producer's fatal error, an unknown partition) is
 * still accepted: its result is queued and reported from the loop on the next
 * pass (a zero-delay ev_timer), so done never runs inside crier_kafka_send.
 * Only a full sender (max_inflight, or librdkafka's own queue full) and a bad
 * request return -1.
 *
 * Other choices: per-message state comes from a pool carved out of chunks the
 * sender owns, so destroying the producer can never leak it whether or not
 * librdkafka served every report; the io watcher is unref'd (it alone does not
 * keep ev_run alive), the timers keep the loop alive while work is in flight;
 * the sender may be freed from inside a done callback (it is destroyed once
 * dispatch unwinds). */
#define _GNU_SOURCE /* strcasecmp in strings.h, eventfd flags */

#include "kafka.h"

#include "clock.h"
#include "log.h"

#include <ev.h>
#include <librdkafka/rdkafka.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define KAFKA_DEFAULT_MESSAGE_TIMEOUT_MS 30000
#define KAFKA_DEFAULT_MAX_INFLIGHT 10000
#define KAFKA_DEFAULT_CLOSE_TIMEOUT_MS 2000
/* Extra wait after purging at close, for the purged messages' reports. */
#define KAFKA_PURGE_WAIT_MS 500
/* Safety-net poll interval while messages are in flight. */
#define KAFKA_POLL_INTERVAL_S 0.1
/* Longest key accepted (notification keys are far shorter). */
#define KAFKA_MAX_KEY_LEN 512
/* Kafka's own limit on topic names. */
#define KAFKA_MAX_TOPIC_LEN 249
#define KAFKA_MAX_HEADERS 16
/* librdkafka's default queue.buffering.max.messages. */
#define KAFKA_LIBRDKAFKA_QUEUE_MAX 100000
/* Per-message states allocated at a time. */
#define KAFKA_CHUNK_MESSAGES 256
#define KAFKA_IDEMPOTENCY_HEADER "idempotency-key"

typedef struct kafka_message kafka_message;
typedef struct kafka_chunk kafka_chunk;

/* One accepted request until its result is reported; then back in the pool. */
struct kafka_message {
    kafka_message *next; /* the free pool, or the deferred list */
    int64_t token;       /* handed back in the result */
    int64_t delivery_id; /* for the log */
    double start_ms;
    rd_kafka_resp_err_t deferred_err; /* for a synchronously refused message */
};

struct kafka_chunk {
    kafka_chunk *next;
    kafka_message messages[KAFKA_CHUNK_MESSAGES];
};

struct crier_kafka_sender {
    struct ev_loop *loop;
    rd_kafka_t *rk;
    rd_kafka_queue_t *mainq;
    int efd;
    ev_io io;               /* the eventfd librdkafka signals */
    ev_timer poll_timer;    /* safety net while inflight > 0 */
    ev_timer deferred_timer; /* zero-delay: reports synchronously refused messages */
    int message_timeout_ms;
    int max_inflight;
    int close_timeout_ms;
    crier_kafka_done_fn done;
    void *ud;
    int inflight;
    kafka_chunk *chunks;
    kafka_message *pool;
    kafka_message *deferred_head, *deferred_tail;
    int dispatching; /* > 0 while done callbacks may run */
    int closing;     /* free has begun: no more done calls */
    int has_fatal;
    char fatal[512];
};

/* ---- message pool ------------------------------------------------------- */

static kafka_message *kafka_message_get(crier_kafka_sender *s)
{
    kafka_message *m;

    if (!s->pool) {
        kafka_chunk *c = malloc(sizeof *c);
        int i;

        if (!c)
            return NULL;
        c->next = s->chunks;
        s->chunks = c;
        for (i = KAFKA_CHUNK_MESSAGES - 1; i >= 0; i--) {
            c->messages[i].next = s->pool;
            s->pool = &c->messages[i];
        }
    }
    m = s->pool;
    s->pool = m->next;
    memset(m, 0, sizeof *m);
    return m;
}

static void kafka_message_put(crier_kafka_sender *s, kafka_message *m)
{
    m->next = s->pool;
    s->pool = m;
}

/* ---- classification ----------------------------------------------------- */

/* True when retrying err later can succeed. The permanent ones are about the
 * message or its destination, which a retry does not change. Everything else
 * (timeouts, transport, leadership moves, purges, a fatal producer that a new
 * producer replaces) is retriable: the retry schedule ends in "dead" anyway. */
static int kafka_is_retriable(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR_INVALID_REQUIRED_ACKS:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
        return 0;
    default:
        return 1;
    }
}

/* Records the producer's fatal error once, if there is one. Returns has_fatal. */
static int kafka_check_fatal(crier_kafka_sender *s)
{
    char reason[400];
    rd_kafka_resp_err_t err;

    if (s->has_fatal)
        return 1;
    reason[0] = '\0';
    err = rd_kafka_fatal_error(s->rk, reason, sizeof reason);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
        return 0;
    snprintf(s->fatal, sizeof s->fatal, "%s: %s", rd_kafka_err2name(err), reason);
    s->has_fatal = 1;
    crier_error("kafka",
                "producer fatal error (%s); every further delivery fails: recreate the "
                "producer",
                s->fatal);
    return 1;
}

/* ---- results ------------------------------------------------------------ */

static void kafka_update_timers(crier_kafka_sender *s)
{
    if (s->closing)
        return;
    if (s->inflight > 0 && !ev_is_active(&s->poll_timer)) {
        ev_timer_set(&s->poll_timer, KAFKA_POLL_INTERVAL_S, KAFKA_POLL_INTERVAL_S);
        ev_timer_start(s->loop, &s->poll_timer);
    } else if (s->inflight == 0 && ev_is_active(&s->poll_timer)) {
        ev_timer_stop(s->loop, &s->poll_timer);
    }
    if (s->deferred_head && !ev_is_active(&s->deferred_timer)) {
        ev_timer_set(&s->deferred_timer, 0.0, 0.0);
        ev_timer_start(s->loop, &s->deferred_timer);
    }
}

/* Fills the error part of r from err. */
static void kafka_set_error(crier_kafka_sender *s, crier_kafka_result *r, rd_kafka_resp_err_t err,
                            const char *detail)
{
    r->error_code = (int)err;
    r->partition = -1;
    r->offset = -1;
    if (kafka_check_fatal(s)) {
        /* Once fatal, every failure is the producer's: librdkafka reports the
         * underlying code (or _FATAL). A new producer may take the message. */
        r->error = s->fatal;
        r->retriable = 1;
    } else {
        r->error = detail && detail[0] ? detail : rd_kafka_err2str(err);
        r->retriable = kafka_is_retriable(err);
    }
}

/* rd_kafka dr_msg_cb: runs inside rd_kafka_poll, i.e. on the loop (or inside
 * the flush of sender_free, where nothing is reported any more). */
static void kafka_dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    crier_kafka_sender *s = opaque;
    kafka_message *m = rkm->_private;
    crier_kafka_result r;

    (void)rk;
    if (!m)
        return;
    if (s->closing) {
        kafka_message_put(s, m);
        return;
    }
    memset(&r, 0, sizeof r);
    r.token = m->token;
    r.duration_ms = crier_clock_ms() - m->start_ms;
    if (rkm->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        r.partition = rkm->partition;
        /* librdkafka reports RD_KAFKA_OFFSET_INVALID (-1001) for a success
         * without an offset: a retried batch the broker answered with
         * DUPLICATE_SEQUENCE_NUMBER, or one acknowledged implicitly by a later
         * batch's success. The result says -1, as documented. */
        r.offset = rkm->offset >= 0 ? rkm->offset : -1;
    } else {
        /* (rd_kafka_message_errstr is for consumers: it reads the payload.) */
        kafka_set_error(s, &r, rkm->err, NULL);
        r.possibly_delivered =
            rd_kafka_message_status(rkm) != RD_KAFKA_MSG_STATUS_NOT_PERSISTED;
    }
    r.fatal = kafka_check_fatal(s);
    kafka_message_put(s, m);
    s->inflight--;
    s->done(s->ud, &r);
}

/* rd_kafka error_cb: served from the main queue, on the loop. */
static void kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    crier_kafka_sender *s = opaque;

    (void)rk;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        kafka_check_fatal(s);
        return;
    }
    /* Broker connections come and go (idle disconnects, leader moves); the
     * producer reconnects by itself. */
    if (err == RD_KAFKA_RESP_ERR__TRANSPORT || err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        crier_info("kafka", "%s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
    else
        crier_warn("kafka", "%s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* rd_kafka log_cb: with log.queue the lines are served from the main queue,
 * on the loop, not from librdkafka's threads. level is syslog's; librdkafka
 * logs recoverable trouble (a refused connection) at LOG_ERR, so that is a
 * warning here; a fatal error is logged as an error by kafka_check_fatal. */
static void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    crier_log_level l = level <= 2 ? CRIER_LOG_ERROR
                        : level <= 4 ? CRIER_LOG_WARN
                        : level <= 6 ? CRIER_LOG_INFO
                                     : CRIER_LOG_DEBUG;

    (void)rk;
    crier_log(l, "kafka", "librdkafka %s: %s", fac, buf);
}

static void kafka_sender_destroy(crier_kafka_sender *s);

/* Runs after a dispatch pass: destroys a sender freed from inside done, or
 * re-arms the timers. */
static void kafka_after_dispatch(crier_kafka_sender *s)
{
    if (s->closing) {
        if (s->dispatching == 0)
            kafka_sender_destroy(s);
        return;
    }
    kafka_update_timers(s);
}

/* Serves librdkafka's main queue without blocking. */
static void kafka_poll(crier_kafka_sender *s)
{
    s->dispatching++;
    rd_kafka_poll(s->rk, 0);
    s->dispatching--;
    kafka_after_dispatch(s);
}

static void kafka_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    crier_kafka_sender *s = w->data;
    uint64_t count;

    (void)loop;
    (void)revents;
    /* Reset the eventfd before polling: anything queued after the poll finds
     * the queue empty again and signals anew. */
    while (read(s->efd, &count, sizeof count) < 0 && errno == EINTR)
        ;
    kafka_poll(s);
}

static void kafka_poll_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    kafka_poll(w->data);
}

/* Reports the messages refused synchronously by librdkafka. */
static void kafka_deferred_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_kafka_sender *s = w->data;

    (void)loop;
    (void)revents;
    s->dispatching++;
    while (!s->closing && s->deferred_head) {
        kafka_message *m = s->deferred_head;
        crier_kafka_result r;

        s->deferred_head = m->next;
        if (!s->deferred_head)
            s->deferred_tail = NULL;
        memset(&r, 0, sizeof r);
        r.token = m->token;
        r.duration_ms = crier_clock_ms() - m->start_ms;
        kafka_set_error(s, &r, m->deferred_err, NULL);
        r.fatal = kafka_check_fatal(s);
        kafka_message_put(s, m);
        s->inflight--;
        s->done(s->ud, &r);
    }
    s->dispatching--;
    kafka_after_dispatch(s);
}

/* ---- request validation ------------------------------------------------- */

/* True when s has no C0 control characters and no DEL. */
static int kafka_is_printable(const char *s)
{
    const unsigned char *p;

    for (p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

/* Kafka's rule for topic names: 1..249 of [A-Za-z0-9._-], not "." or "..". */
static int kafka_is_valid_topic(const char *t)
{
    size_t i, n = strlen(t);

    if (n == 0 || n > KAFKA_MAX_TOPIC_LEN || strcmp(t, ".") == 0 || strcmp(t, "..") == 0)
        return 0;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int kafka_check_request(const crier_kafka_request *req)
{
    size_t i, key_len;

    if (!req || !req->topic || !req->key || (!req->payload && req->payload_len > 0) ||
        (!req->headers && req->header_count > 0)) {
        crier_warn("kafka", "refused request: missing topic, key or payload");
        return -1;
    }
    if (!kafka_is_valid_topic(req->topic)) {
        crier_warn("kafka",
                   "refused delivery %" PRId64 ": topic is empty, too long or has characters "
                   "outside [A-Za-z0-9._-]",
                   req->delivery_id);
        return -1;
    }
    key_len = strlen(req->key);
    if (key_len == 0 || key_len > KAFKA_MAX_KEY_LEN || !kafka_is_printable(req->key)) {
        crier_warn("kafka", "refused delivery %" PRId64 ": empty, overlong or control character in key",
                   req->delivery_id);
        return -1;
    }
    if (req->header_count > KAFKA_MAX_HEADERS) {
        crier_warn("kafka", "refused delivery %" PRId64 ": more than %d headers", req->delivery_id,
                   KAFKA_MAX_HEADERS);
        return -1;
    }
    for (i = 0; i < req->header_count; i++) {
        const crier_kafka_header *h = &req->headers[i];
        if (!h->name || !h->value || !h->name[0] || !kafka_is_printable(h->name) ||
            strcasecmp(h->name, KAFKA_IDEMPOTENCY_HEADER) == 0) {
            crier_warn("kafka", "refused delivery %" PRId64 ": bad or reserved header name",
                       req->delivery_id);
            return -1;
        }
    }
    return 0;
}

/* ---- configuration ------------------------------------------------------ */

static int kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char errstr[256];

    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
        crier_warn("kafka", "config %s: %s", name, errstr);
        return -1;
    }
    return 0;
}

/* Properties the sender owns: changing them would break its promises (no
 * duplicates, acks from all replicas, results on the loop, one deadline). */
static int kafka_is_reserved_property(const char *name)
{
    static const char *const reserved[] = {
        "enable.idempotence", "acks", "request.required.acks", "message.timeout.ms",
        "delivery.timeout.ms", "transactional.id", "log.queue", "enable.gapless.guarantee",
    };
    size_t i;

    for (i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (strcmp(name, reserved[i]) == 0)
            return 1;
    return 0;
}

/* Applies one "name=value" extra property. */
static int kafka_conf_apply_extra(rd_kafka_conf_t *conf, const char *pair)
{
    const char *eq = pair ? strchr(pair, '=') : NULL;
    char name[128];
    size_t n;

    if (!eq || eq == pair || (size_t)(eq - pair) >= sizeof name) {
        crier_warn("kafka", "config entry \"%s\" is not name=value", pair ? pair : "(null)");
        return -1;
    }
    n = (size_t)(eq - pair);
    memcpy(name, pair, n);
    name[n] = '\0';
    if (kafka_is_reserved_property(name)) {
        crier_warn("kafka", "config %s is set by crier and cannot be overridden", name);
        return -1;
    }
    return kafka_conf_set(conf, name, eq + 1);
}

/* ---- public API --------------------------------------------------------- */

crier_kafka_sender *crier_kafka_sender_new(struct ev_loop *loop, const crier_kafka_options *opts,
                                           crier_kafka_done_fn done, void *ud)
{
    static const uint64_t one = 1;
    crier_kafka_sender *s = NULL;
    rd_kafka_conf_t *conf = NULL;
    char errstr[512], num[32];
    size_t i;

    if (!loop || !done || !opts || !opts->bootstrap_servers || !opts->bootstrap_servers[0] ||
        (!opts->config && opts->config_count > 0)) {
        crier_warn("kafka", "sender needs a loop, a done callback and bootstrap servers");
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        goto fail;
    s->loop = loop;
    s->done = done;
    s->ud = ud;
    s->efd = -1;
    /* Zero (or negative) fields mean "default", so a zeroed struct works. */
    s->message_timeout_ms =
        opts->message_timeout_ms > 0 ? opts->message_timeout_ms : KAFKA_DEFAULT_MESSAGE_TIMEOUT_MS;
    s->max_inflight = opts->max_inflight > 0 ? opts->max_inflight : KAFKA_DEFAULT_MAX_INFLIGHT;
    s->close_timeout_ms =
        opts->close_timeout_ms > 0 ? opts->close_timeout_ms : KAFKA_DEFAULT_CLOSE_TIMEOUT_MS;
    ev_init(&s->poll_timer, kafka_poll_timer_cb);
    s->poll_timer.data = s;
    ev_init(&s->deferred_timer, kafka_deferred_cb);
    s->deferred_timer.data = s;

    conf = rd_kafka_conf_new();
    if (!conf)
        goto fail;
    if (kafka_conf_set(conf, "bootstrap.servers", opts->bootstrap_servers) ||
        kafka_conf_set(conf, "client.id", "crier"))
        goto fail;
    if (s->max_inflight > KAFKA_LIBRDKAFKA_QUEUE_MAX) {
        snprintf(num, sizeof num, "%d", s->max_inflight);
        if (kafka_conf_set(conf, "queue.buffering.max.messages", num))
            goto fail;
    }
    for (i = 0; i < opts->config_count; i++)
        if (kafka_conf_apply_extra(conf, opts->config[i]))
            goto fail;
    snprintf(num, sizeof num, "%d", s->message_timeout_ms);
    if (kafka_conf_set(conf, "enable.idempotence", "true") || kafka_conf_set(conf, "acks", "all") ||
        kafka_conf_set(conf, "message.timeout.ms", num) ||
        kafka_conf_set(conf, "log.queue", "true"))
        goto fail;
    rd_kafka_conf_set_opaque(conf, s);
    rd_kafka_conf_set_dr_msg_cb(conf, kafka_dr_msg_cb);
    rd_kafka_conf_set_error_cb(conf, kafka_error_cb);
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);

    s->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!s->rk) {
        crier_warn("kafka", "rd_kafka_new: %s", errstr);
        goto fail;
    }
    conf = NULL; /* owned by rk now */
    /* Log lines go to the main queue, served on the loop like the rest. */
    if (rd_kafka_set_log_queue(s->rk, NULL) != RD_KAFKA_RESP_ERR_NO_ERROR)
        goto fail;
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        crier_warn("kafka", "eventfd: %s", strerror(errno));
        goto fail;
    }
    s->mainq = rd_kafka_queue_get_main(s->rk);
    if (!s->mainq)
        goto fail;
    rd_kafka_queue_io_event_enable(s->mainq, s->efd, &one, sizeof one);
    ev_io_init(&s->io, kafka_io_cb, s->efd, EV_READ);
    s->io.data = s;
    ev_io_start(loop, &s->io);
    ev_unref(loop); /* a background watcher: the timers hold the loop while busy */
    /* Anything queued before the io event was enabled (early log lines). */
    rd_kafka_poll(s->rk, 0);
    crier_info("kafka", "producer for %s (idempotent, acks=all, message.timeout.ms=%d)",
               opts->bootstrap_servers, s->message_timeout_ms);
    return s;
fail:
    crier_warn("kafka", "could not create the kafka producer");
    if (conf)
        rd_kafka_conf_destroy(conf);
    if (s) {
        if (s->mainq) {
            rd_kafka_queue_io_event_enable(s->mainq, -1, NULL, 0);
            rd_kafka_queue_destroy(s->mainq);
        }
        if (s->rk)
            rd_kafka_destroy(s->rk);
        if (s->efd >= 0)
            close(s->efd);
        free(s);
    }
    return NULL;
}

int crier_kafka_send(crier_kafka_sender *s, const crier_kafka_request *req)
{
    rd_kafka_vu_t vu[6 + KAFKA_MAX_HEADERS];
    size_t n = 0, i;
    kafka_message *m;
    rd_kafka_error_t *error;
    rd_kafka_resp_err_t err;

    if (!s || s->closing || kafka_check_request(req) != 0)
        return -1;
    if (s->inflight >= s->max_inflight)
        return -1;
    m = kafka_message_get(s);
    if (!m) {
        crier_warn("kafka", "out of memory for a message");
        return -1;
    }
    m->token = req->token;
    m->delivery_id = req->delivery_id;
    m->start_ms = crier_clock_ms();

    memset(vu, 0, sizeof vu);
    vu[n].vtype = RD_KAFKA_VTYPE_TOPIC;
    vu[n++].u.cstr = req->topic;
    vu[n].vtype = RD_KAFKA_VTYPE_KEY;
    vu[n].u.mem.ptr = (void *)req->key;
    vu[n++].u.mem.size = strlen(req->key);
    vu[n].vtype = RD_KAFKA_VTYPE_VALUE;
    vu[n].u.mem.ptr = (void *)(req->payload ? req->payload : "");
    vu[n++].u.mem.size = req->payload_len;
    vu[n].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
    vu[n++].u.i = RD_KAFKA_MSG_F_COPY;
    vu[n].vtype = RD_KAFKA_VTYPE_OPAQUE;
    vu[n++].u.ptr = m;
    vu[n].vtype = RD_KAFKA_VTYPE_HEADER;
    vu[n].u.header.name = KAFKA_IDEMPOTENCY_HEADER;
    vu[n].u.header.val = req->key;
    vu[n++].u.header.size = (ssize_t)strlen(req->key);
    for (i = 0; i < req->header_count; i++) {
        vu[n].vtype = RD_KAFKA_VTYPE_HEADER;
        vu[n].u.header.name = req->headers[i].name;
        vu[n].u.header.val = req->headers[i].value;
        vu[n++].u.header.size = (ssize_t)strlen(req->headers[i].value);
    }
    assert(n <= sizeof vu / sizeof vu[0]);

    error = rd_kafka_produceva(s->rk, vu, n);
    if (error) {
        err = rd_kafka_error_code(error);
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            crier_debug("kafka", "refused delivery %" PRId64 ": librdkafka queue full",
                        req->delivery_id);
            rd_kafka_error_destroy(error);
            kafka_message_put(s, m);
            return -1;
        }
        crier_debug("kafka", "delivery %" PRId64 " failed at produce: %s", req->delivery_id,
                    rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
        /* Accepted, and reported from the loop: never inside send. */
        m->deferred_err = err;
        m->next = NULL;
        if (s->deferred_tail)
            s->deferred_tail->next = m;
        else
            s->deferred_head = m;
        s->deferred_tail = m;
    }
    s->inflight++;
    kafka_update_timers(s);
    return 0;
}

int crier_kafka_inflight(const crier_kafka_sender *s)
{
    return s ? s->inflight : 0;
}

const char *crier_kafka_fatal_error(const crier_kafka_sender *s)
{
    if (!s)
        return NULL;
    /* The error may be raised before its event is served on the loop. */
    kafka_check_fatal((crier_kafka_sender *)s);
    return s->has_fatal ? s->fatal : NULL;
}

int crier_kafka_test_fatal(crier_kafka_sender *s)
{
    if (!s || rd_kafka_test_fatal_error(s->rk, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                                        "crier test") != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    return 0;
}

static void kafka_sender_destroy(crier_kafka_sender *s)
{
    kafka_chunk *c, *next;
    int left;

    ev_timer_stop(s->loop, &s->poll_timer);
    ev_timer_stop(s->loop, &s->deferred_timer);
    ev_ref(s->loop); /* balances the ev_unref after ev_io_start */
    ev_io_stop(s->loop, &s->io);

    /* Bounded wait for acknowledgements (reports are swallowed: closing). */
    if (rd_kafka_flush(s->rk, s->close_timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        left = rd_kafka_outq_len(s->rk);
        crier_warn("kafka",
                   "%d message(s) still unacknowledged after %d ms at close: purging "
                   "(their deliveries are retried after the lease expires)",
                   left, s->close_timeout_ms);
        rd_kafka_purge(s->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_flush(s->rk, KAFKA_PURGE_WAIT_MS);
    }
    rd_kafka_queue_io_event_enable(s->mainq, -1, NULL, 0);
    rd_kafka_queue_destroy(s->mainq);
    rd_kafka_destroy(s->rk);
    close(s->efd);
    /* Per-message state lives in the chunks: nothing outlives them. */
    for (c = s->chunks; c; c = next) {
        next = c->next;
        free(c);
    }
    free(s);
}

void crier_kafka_sender_free(crier_kafka_sender *s)
{
    if (!s)
        return;
    s->closing = 1;
    /* Called from inside a done callback: finish once dispatch unwinds. */
    if (s->dispatching > 0)
        return;
    kafka_sender_destroy(s);
}
