/* test_webhook.c — tests the webhook sender against real local HTTP servers:
 * tests/support/receiver.py (statuses, headers, bodies, timeouts, throughput,
 * signatures verified by the receiver for several secrets) and a tiny forked
 * raw-socket server for responses receiver.py cannot give (Retry-After, long
 * bodies, a stalled body, a redirect). Also checks crier_webhook_sign against
 * the Standard Webhooks test vector and independently computed HMACs, the SSRF
 * guard at connect time (default options refuse 127.0.0.1 and nothing reaches
 * the server) and the body size limit. The servers listen on 127.0.0.1, so
 * every sender that must reach them allows loopback targets explicitly. */
#define _GNU_SOURCE /* strcasestr */

#include "log.h"
#include "webhook.h"

#include <curl/curl.h>
#include <ev.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "child_server.h"

#define MAX_OUTCOMES 4096

/* Options of every sender that talks to the local test servers. */
static const crier_webhook_options loopback_opts = {.allow_targets = CRIER_TARGET_ALLOW_LOOPBACK};

/* What the done callback saw for one delivery id. */
typedef struct {
    int calls;
    long status;
    int has_error;
    char error[256];
    int timed_out;
    char excerpt[256];
    double duration_ms;
    long retry_after_s;
    int refused;
} outcome;

typedef struct {
    struct ev_loop *loop;
    crier_webhook_sender *sender;
    outcome out[MAX_OUTCOMES];
    int completed;
    int expected;
    int in_send;      /* set around crier_webhook_send: done must not run then */
    int free_in_done; /* free the sender from inside the first done call */
    int reentrant_calls;
    /* throughput phase: send the next request from inside done */
    int bench_next, bench_total;
    const char *bench_url;
} test_ctx;

static test_ctx ctx;

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void bench_send_next(test_ctx *c);

static void on_done(void *ud, const crier_webhook_result *r)
{
    test_ctx *c = ud;
    outcome *o;

    if (c->in_send)
        c->reentrant_calls++;
    if (r->token < 0 || r->token >= MAX_OUTCOMES) {
        check_failures++;
        fprintf(stderr, "unexpected delivery id %lld\n", (long long)r->token);
        return;
    }
    o = &c->out[r->token];
    o->calls++;
    o->status = r->http_status;
    o->has_error = r->error != NULL;
    snprintf(o->error, sizeof o->error, "%s", r->error ? r->error : "");
    o->timed_out = r->timed_out;
    snprintf(o->excerpt, sizeof o->excerpt, "%s", r->response_excerpt ? r->response_excerpt : "");
    o->duration_ms = r->duration_ms;
    o->retry_after_s = r->retry_after_s;
    o->refused = r->refused;
    c->completed++;
    if (c->free_in_done) {
        c->free_in_done = 0;
        crier_webhook_sender_free(c->sender);
        c->sender = NULL;
    }
    if (c->bench_total && c->bench_next < c->bench_total)
        bench_send_next(c);
    if (c->completed >= c->expected)
        ev_break(c->loop, EVBREAK_ALL);
}

static void on_guard(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Runs the loop until `expected` completions or seconds have passed. */
static void run_loop(test_ctx *c, int expected, double seconds)
{
    ev_timer guard;

    c->expected = expected;
    if (c->completed >= expected && seconds <= 0)
        return;
    ev_timer_init(&guard, on_guard, seconds, 0.0);
    ev_timer_start(c->loop, &guard);
    if (c->completed < expected || expected == 0)
        ev_run(c->loop, 0);
    ev_timer_stop(c->loop, &guard);
}

static void reset_ctx(test_ctx *c)
{
    struct ev_loop *loop = c->loop;

    memset(c, 0, sizeof *c);
    c->loop = loop;
}

static int send_req(test_ctx *c, const crier_webhook_request *req)
{
    int rc;

    c->in_send = 1;
    rc = crier_webhook_send(c->sender, req);
    c->in_send = 0;
    return rc;
}

/* A request with the body "{}" to url under webhook_id, nothing else set. */
static crier_webhook_request empty_body_request(const char *url, const char *webhook_id)
{
    crier_webhook_request req;

    memset(&req, 0, sizeof req);
    req.url = url;
    req.body = "{}";
    req.body_len = 2;
    req.webhook_id = webhook_id;
    return req;
}

/* ---- the python receiver ------------------------------------------------ */

typedef struct {
    pid_t pid;
    int port;
    char log_path[512];
} receiver;

static int receiver_start(receiver *r, const char *dir, const char *name, const char *statuses,
                          const char *delay_ms, const char *secrets)
{
    const char *src = getenv("CRIER_SOURCE_DIR");
    char script[1024], port_file[512];
    const char *argv[14];
    int argc = 0;

    if (!src || !*src)
        src = ".";
    snprintf(script, sizeof script, "%s/tests/support/receiver.py", src);
    snprintf(port_file, sizeof port_file, "%s/%s.port", dir, name);
    snprintf(r->log_path, sizeof r->log_path, "%s/%s.log", dir, name);
    argv[argc++] = "/usr/bin/python3";
    argv[argc++] = script;
    argv[argc++] = "--port-file";
    argv[argc++] = port_file;
    argv[argc++] = "--log";
    argv[argc++] = r->log_path;
    if (statuses) {
        argv[argc++] = "--statuses";
        argv[argc++] = statuses;
    }
    if (delay_ms) {
        argv[argc++] = "--delay-ms";
        argv[argc++] = delay_ms;
    }
    if (secrets) {
        argv[argc++] = "--secrets";
        argv[argc++] = secrets;
    }
    argv[argc] = NULL;

    r->pid = child_server_start(argv, port_file, &r->port);
    return r->pid > 0 ? 0 : -1;
}

static void receiver_stop(receiver *r)
{
    child_server_stop(r->pid);
    r->pid = 0;
}

/* ---- a raw-socket server for canned responses ----------------------------- */

static int listen_local(int *port)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static void raw_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Serves one connection: reads the request, answers according to its path. */
static void raw_serve_one(int c)
{
    char req[65536], resp[1024], date[64];
    size_t have = 0;
    char *end = NULL, *cl;
    long body_len = 0;
    time_t when;
    struct tm tm;

    while (have < sizeof req - 1) {
        ssize_t n = recv(c, req + have, sizeof req - 1 - have, 0);
        if (n <= 0)
            return;
        have += (size_t)n;
        req[have] = '\0';
        end = strstr(req, "\r\n\r\n");
        if (end)
            break;
    }
    if (!end)
        return;
    cl = strcasestr(req, "\r\ncontent-length:");
    if (cl)
        body_len = strtol(cl + 17, NULL, 10);
    while ((long)(have - (size_t)(end + 4 - req)) < body_len && have < sizeof req - 1) {
        ssize_t n = recv(c, req + have, sizeof req - 1 - have, 0);
        if (n <= 0)
            break;
        have += (size_t)n;
    }

    if (strncmp(req, "POST /ra-int ", 13) == 0) {
        snprintf(resp, sizeof resp,
                 "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 120\r\n"
                 "Content-Length: 0\r\nConnection: close\r\n\r\n");
        raw_write_all(c, resp, strlen(resp));
    } else if (strncmp(req, "POST /ra-date ", 14) == 0) {
        when = time(NULL) + 3600;
        gmtime_r(&when, &tm);
        strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        snprintf(resp, sizeof resp,
                 "HTTP/1.1 503 Service Unavailable\r\nretry-after:  %s \r\n"
                 "Content-Length: 0\r\nConnection: close\r\n\r\n",
                 date);
        raw_write_all(c, resp, strlen(resp));
    } else if (strncmp(req, "POST /excerpt ", 14) == 0) {
        const char *body = "0123456789abcdefghijklmnopqrstuvwxyz";
        snprintf(resp, sizeof resp,
                 "HTTP/1.1 400 Bad Request\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n%s",
                 strlen(body), body);
        raw_write_all(c, resp, strlen(resp));
    } else if (strncmp(req, "POST /big ", 10) == 0) {
        static char chunk[65536];
        long total = 3L * 1024 * 1024, sent = 0;
        memset(chunk, 'z', sizeof chunk);
        snprintf(resp, sizeof resp,
                 "HTTP/1.1 200 OK\r\nContent-Length: %ld\r\n"
                 "Connection: close\r\n\r\n",
                 total);
        raw_write_all(c, resp, strlen(resp));
        while (sent < total) {
            ssize_t w = send(c, chunk, sizeof chunk, MSG_NOSIGNAL);
            if (w <= 0)
                break;
            sent += w;
        }
    } else if (strncmp(req, "POST /redirect ", 15) == 0) {
        snprintf(resp, sizeof resp,
                 "HTTP/1.1 302 Found\r\nLocation: /excerpt\r\n"
                 "Content-Length: 0\r\nConnection: close\r\n\r\n");
        raw_write_all(c, resp, strlen(resp));
    } else if (strncmp(req, "POST /idle-close ", 17) == 0) {
        /* kept alive as far as curl knows; closed once answered (a receiver's
         * idle timeout, early) */
        snprintf(resp, sizeof resp, "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
        raw_write_all(c, resp, strlen(resp));
    } else if (strncmp(req, "POST /stall ", 12) == 0) {
        snprintf(resp, sizeof resp,
                 "HTTP/1.1 202 Accepted\r\nContent-Length: 100\r\n"
                 "Connection: close\r\n\r\npartial");
        raw_write_all(c, resp, strlen(resp));
        sleep(3);
    } else {
        snprintf(resp, sizeof resp,
                 "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                 "Connection: close\r\n\r\n");
        raw_write_all(c, resp, strlen(resp));
    }
}

/* Forks a server that answers connections one at a time until killed. */
static pid_t raw_server_start(int *port)
{
    int fd = listen_local(port);
    pid_t pid;

    if (fd < 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_IGN);
        for (;;) {
            int c = accept(fd, NULL, NULL);
            if (c < 0) {
                if (errno == EINTR)
                    continue;
                _exit(1);
            }
            raw_serve_one(c);
            close(c);
        }
    }
    close(fd);
    return pid;
}

/* ---- a minimal reader for receiver.py's JSON lines ---------------------- */

static void put_utf8(char **o, unsigned cp)
{
    if (cp < 0x80) {
        *(*o)++ = (char)cp;
    } else if (cp < 0x800) {
        *(*o)++ = (char)(0xc0 | (cp >> 6));
        *(*o)++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *(*o)++ = (char)(0xe0 | (cp >> 12));
        *(*o)++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *(*o)++ = (char)(0x80 | (cp & 0x3f));
    }
}

/* Finds "key": "..." in a json.dumps line and returns the unescaped string
 * (malloc'd), or NULL if absent. Handles the escapes json.dumps writes for
 * BMP characters. */
static char *json_get(const char *line, const char *key)
{
    char pat[128], *out, *o;
    const char *p;

    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    p = strstr(line, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    out = o = malloc(strlen(p) + 1);
    if (!out)
        return NULL;
    while (*p && *p != '"') {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        p++;
        switch (*p) {
        case 'n':
            *o++ = '\n';
            p++;
            break;
        case 'r':
            *o++ = '\r';
            p++;
            break;
        case 't':
            *o++ = '\t';
            p++;
            break;
        case 'b':
            *o++ = '\b';
            p++;
            break;
        case 'f':
            *o++ = '\f';
            p++;
            break;
        case 'u': {
            unsigned cp = 0;
            sscanf(p + 1, "%4x", &cp);
            put_utf8(&o, cp);
            p += 5;
            break;
        }
        default:
            *o++ = *p++;
            break;
        }
    }
    *o = '\0';
    return out;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_sign(void)
{
    char sig[64];
    char small[20];

    CHECK(crier_webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                             "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, "{\"test\": 2432232314}",
                             20, sig, sizeof sig) == 0);
    CHECK(strcmp(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=") == 0);
    /* Not base64, bad padding, empty key, buffer too small. */
    CHECK(crier_webhook_sign("whsec_not*base64", "id", 1, "{}", 2, sig, sizeof sig) == -1);
    CHECK(crier_webhook_sign("whsec_QUJD=", "id", 1, "{}", 2, sig, sizeof sig) == -1);
    CHECK(crier_webhook_sign("whsec_", "id", 1, "{}", 2, sig, sizeof sig) == -1);
    CHECK(crier_webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "id", 1, "{}", 2, small,
                             sizeof small) == -1);
    /* Unpadded base64 is the same key as padded. */
    {
        char a[64], b[64];
        CHECK(crier_webhook_sign("whsec_QUJDRA==", "id", 1, "{}", 2, a, sizeof a) == 0);
        CHECK(crier_webhook_sign("whsec_QUJDRA", "id", 1, "{}", 2, b, sizeof b) == 0);
        CHECK(strcmp(a, b) == 0);
        /* Without the prefix the secret is the raw key: "ABCD" == base64 QUJDRA. */
        CHECK(crier_webhook_sign("ABCD", "id", 1, "{}", 2, b, sizeof b) == 0);
        CHECK(strcmp(a, b) == 0);
    }
}

static void test_refusals(void)
{
    crier_webhook_request req;
    const char *bad_ids[] = {"msg\r\nX-Evil: 1", "msg\n", "msg\x01", "msg\x7f", ""};
    const char *bad_urls[] = {"http://127.0.0.1:1/\r\nX-Evil: 1",
                              "http://127.0.0.1:1/\n",
                              "http://127.0.0.1:1/a b",
                              "ftp://127.0.0.1/",
                              "file:///etc/passwd",
                              "gopher://127.0.0.1/"};
    size_t i;
    char long_id[600];

    reset_ctx(&ctx);
    ctx.sender = crier_webhook_sender_new(ctx.loop, NULL, on_done, &ctx);
    CHECK(ctx.sender != NULL);
    req = empty_body_request("http://127.0.0.1:1/", NULL);
    for (i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        req.webhook_id = bad_ids[i];
        CHECK(send_req(&ctx, &req) == -1);
    }
    memset(long_id, 'a', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    req.webhook_id = long_id;
    CHECK(send_req(&ctx, &req) == -1);
    req.webhook_id = "msg_ok";
    for (i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++) {
        req.url = bad_urls[i];
        CHECK(send_req(&ctx, &req) == -1);
    }
    req.url = "http://127.0.0.1:1/";
    req.secret = "whsec_!!!";
    CHECK(send_req(&ctx, &req) == -1);
    req.secret = NULL;
    req.body = NULL;
    CHECK(send_req(&ctx, &req) == -1); /* body_len 2 with no body */
    CHECK(crier_webhook_send(ctx.sender, NULL) == -1);
    CHECK(crier_webhook_inflight(ctx.sender) == 0);
    crier_webhook_sender_free(ctx.sender);
    crier_webhook_sender_free(NULL);
}

#define BATCH 20
#define TEST_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

static char *batch_body(int i)
{
    char *b;

    if (i == 1) { /* a large body, past curl's Expect: 100-continue threshold */
        size_t n = 64 * 1024;
        b = malloc(n + 32);
        if (!b)
            abort();
        strcpy(b, "{\"big\":\"");
        memset(b + 8, 'x', n);
        strcpy(b + 8 + n, "\"}");
        return b;
    }
    b = malloc(128);
    if (!b)
        abort();
    snprintf(b, 128, "{\"n\":%d,\"text\":\"h\xc3\xa9llo \\\"q\\\" \\\\ end\"}", i);
    return b;
}

/* Starts receiver.py as name (answering statuses, checking secrets if given)
 * and a loopback sender on ctx; url gets the receiver's address plus path.
 * Returns 0, or -1 when the receiver did not start (already a failed check). */
static int receiver_and_sender(receiver *r, const char *dir, const char *name, const char *statuses,
                               const char *secrets, const char *path, char *url, size_t url_len)
{
    CHECK(receiver_start(r, dir, name, statuses, NULL, secrets) == 0);
    if (!r->port)
        return -1;
    reset_ctx(&ctx);
    ctx.sender = crier_webhook_sender_new(ctx.loop, &loopback_opts, on_done, &ctx);
    snprintf(url, url_len, "http://127.0.0.1:%d%s", r->port, path);
    return 0;
}

static void test_batch(const char *dir)
{
    receiver r = {0};
    crier_webhook_request req;
    char url[128], id[64], *bodies[BATCH];
    int i, n500 = 0, n204 = 0, lines = 0;
    FILE *f;
    char *line = NULL;
    size_t cap = 0;

    if (receiver_and_sender(&r, dir, "batch", "500,204", NULL, "/hook?x=1", url, sizeof url) != 0)
        return;
    for (i = 0; i < BATCH; i++) {
        bodies[i] = batch_body(i);
        memset(&req, 0, sizeof req);
        snprintf(id, sizeof id, "msg_test_%d", i);
        req.token = i;
        req.url = url;
        req.body = bodies[i];
        req.body_len = strlen(bodies[i]);
        req.webhook_id = id;
        req.secret = i == 0 ? NULL : TEST_SECRET;
        req.timestamp = i == 2 ? 0 : 1700000000 + i;
        CHECK(send_req(&ctx, &req) == 0);
    }
    CHECK(crier_webhook_inflight(ctx.sender) == BATCH);
    CHECK(ctx.completed == 0); /* nothing completes inside send */
    run_loop(&ctx, BATCH, 10.0);
    CHECK(ctx.completed == BATCH);
    CHECK(ctx.reentrant_calls == 0);
    CHECK(crier_webhook_inflight(ctx.sender) == 0);
    for (i = 0; i < BATCH; i++) {
        outcome *o = &ctx.out[i];
        CHECK(o->calls == 1);
        CHECK(!o->has_error);
        CHECK(o->timed_out == 0);
        CHECK(o->retry_after_s == -1);
        CHECK(o->excerpt[0] == '\0');
        CHECK(o->duration_ms > 0.0 && o->duration_ms < 10000.0);
        n500 += o->status == 500;
        n204 += o->status == 204;
    }
    CHECK(n500 == 1);
    CHECK(n204 == BATCH - 1);

    /* What the receiver saw. */
    f = fopen(r.log_path, "r");
    CHECK(f != NULL);
    while (f && getline(&line, &cap, f) > 0) {
        char *hid = json_get(line, "webhook-id"), *idem = json_get(line, "idempotency-key");
        char *ctype = json_get(line, "content-type"), *ua = json_get(line, "user-agent");
        char *ts = json_get(line, "webhook-timestamp"), *sig = json_get(line, "webhook-signature");
        char *body = json_get(line, "body"), *path = json_get(line, "path");
        char *method = json_get(line, "method"), *expect = json_get(line, "expect");
        char want[64];
        int k = -1;

        lines++;
        CHECK(hid && sscanf(hid, "msg_test_%d", &k) == 1 && k >= 0 && k < BATCH);
        if (k < 0 || k >= BATCH)
            k = 0;
        CHECK(idem && hid && strcmp(idem, hid) == 0);
        CHECK(ctype && strcmp(ctype, "application/json") == 0);
        CHECK(ua && strcmp(ua, "crier/0.1") == 0);
        CHECK(method && strcmp(method, "POST") == 0);
        CHECK(path && strcmp(path, "/hook?x=1") == 0);
        CHECK(expect == NULL);
        CHECK(body && strcmp(body, bodies[k]) == 0);
        CHECK(ts != NULL);
        if (ts && k == 2) {
            long long t = atoll(ts);
            CHECK(t > (long long)time(NULL) - 60 && t <= (long long)time(NULL));
        } else if (ts) {
            CHECK(atoll(ts) == 1700000000LL + k);
        }
        if (k == 0) {
            CHECK(sig == NULL);
        } else if (ts) {
            CHECK(crier_webhook_sign(TEST_SECRET, hid, atoll(ts), bodies[k], strlen(bodies[k]),
                                     want, sizeof want) == 0);
            CHECK(sig && strcmp(sig, want) == 0);
        }
        free(hid), free(idem), free(ctype), free(ua), free(ts), free(sig), free(body);
        free(path), free(method), free(expect);
    }
    CHECK(lines == BATCH);
    free(line);
    if (f)
        fclose(f);
    for (i = 0; i < BATCH; i++)
        free(bodies[i]);
    crier_webhook_sender_free(ctx.sender);
    receiver_stop(&r);
}

static void test_timeout_and_limits(const char *dir)
{
    receiver r = {0};
    crier_webhook_options opts = {0};
    crier_webhook_request req;
    char url[128];
    int i;

    CHECK(receiver_start(&r, dir, "slow", "200", "3000", NULL) == 0);
    if (!r.port)
        return;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/slow", r.port);

    /* A total timeout shorter than the receiver's delay. */
    reset_ctx(&ctx);
    opts.allow_targets = CRIER_TARGET_ALLOW_LOOPBACK;
    opts.connect_timeout_ms = 1000;
    opts.total_timeout_ms = 500;
    ctx.sender = crier_webhook_sender_new(ctx.loop, &opts, on_done, &ctx);
    req = empty_body_request(url, "msg_slow");
    req.secret = TEST_SECRET;
    for (i = 0; i < 3; i++) {
        req.token = i;
        CHECK(send_req(&ctx, &req) == 0);
    }
    run_loop(&ctx, 3, 5.0);
    CHECK(ctx.completed == 3);
    for (i = 0; i < 3; i++) {
        outcome *o = &ctx.out[i];
        CHECK(o->calls == 1);
        CHECK(o->timed_out == 1);
        CHECK(o->has_error);
        CHECK(o->status == 0);
        CHECK(o->duration_ms >= 450.0 && o->duration_ms < 2500.0);
    }
    crier_webhook_sender_free(ctx.sender);

    /* max_inflight, then free with transfers in flight: no callbacks. */
    reset_ctx(&ctx);
    opts.max_inflight = 2;
    opts.total_timeout_ms = 10000;
    ctx.sender = crier_webhook_sender_new(ctx.loop, &opts, on_done, &ctx);
    for (i = 0; i < 2; i++) {
        req.token = i;
        CHECK(send_req(&ctx, &req) == 0);
    }
    req.token = 2;
    CHECK(send_req(&ctx, &req) == -1);
    CHECK(crier_webhook_inflight(ctx.sender) == 2);
    run_loop(&ctx, 0, 0.3); /* let the requests reach the receiver */
    CHECK(ctx.completed == 0);
    crier_webhook_sender_free(ctx.sender);
    ctx.sender = NULL;
    run_loop(&ctx, 0, 0.1);
    CHECK(ctx.completed == 0);
    receiver_stop(&r);
}

static void test_refused(void)
{
    crier_webhook_request req;
    char url[128];
    int port = 0, fd = listen_local(&port), i;

    CHECK(fd >= 0);
    close(fd); /* nothing listens on port now */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);

    reset_ctx(&ctx);
    ctx.sender = crier_webhook_sender_new(ctx.loop, &loopback_opts, on_done, &ctx);
    req = empty_body_request(url, "msg_refused");
    for (i = 0; i < 2; i++) {
        req.token = i;
        CHECK(send_req(&ctx, &req) == 0);
    }
    CHECK(ctx.completed == 0);
    run_loop(&ctx, 2, 5.0);
    CHECK(ctx.completed == 2);
    CHECK(ctx.reentrant_calls == 0);
    for (i = 0; i < 2; i++) {
        CHECK(ctx.out[i].calls == 1);
        CHECK(ctx.out[i].has_error);
        CHECK(ctx.out[i].timed_out == 0);
        CHECK(ctx.out[i].status == 0);
        CHECK(ctx.out[i].retry_after_s == -1);
        CHECK(ctx.out[i].refused == 0); /* the connection was tried: not the guard */
    }
    crier_webhook_sender_free(ctx.sender);

    /* Freeing the sender from inside done stops further callbacks. */
    reset_ctx(&ctx);
    ctx.sender = crier_webhook_sender_new(ctx.loop, &loopback_opts, on_done, &ctx);
    ctx.free_in_done = 1;
    for (i = 0; i < 3; i++) {
        req.token = i;
        CHECK(send_req(&ctx, &req) == 0);
    }
    run_loop(&ctx, 3, 1.0);
    CHECK(ctx.completed == 1);
    CHECK(ctx.sender == NULL);
}

static void test_raw_responses(void)
{
    crier_webhook_options opts = {0};
    crier_webhook_request req;
    const char *paths[] = {"/ra-int", "/ra-date", "/excerpt", "/big", "/redirect"};
    char url[128];
    int port = 0, i;
    pid_t pid = raw_server_start(&port);

    CHECK(pid > 0);
    if (pid <= 0)
        return;
    reset_ctx(&ctx);
    opts.allow_targets = CRIER_TARGET_ALLOW_LOOPBACK;
    opts.max_response_bytes = 16;
    opts.total_timeout_ms = 1000;
    ctx.sender = crier_webhook_sender_new(ctx.loop, &opts, on_done, &ctx);
    memset(&req, 0, sizeof req);
    req.body = "{\"a\":1}";
    req.body_len = 7;
    req.webhook_id = "msg_raw";
    for (i = 0; i < 5; i++) {
        snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, paths[i]);
        req.url = url;
        req.token = i;
        CHECK(send_req(&ctx, &req) == 0);
    }
    run_loop(&ctx, 5, 10.0);
    CHECK(ctx.completed == 5);
    /* Retry-After in seconds. */
    CHECK(ctx.out[0].status == 429 && !ctx.out[0].has_error);
    CHECK(ctx.out[0].retry_after_s == 120);
    /* Retry-After as an HTTP-date one hour ahead. */
    CHECK(ctx.out[1].status == 503 && !ctx.out[1].has_error);
    CHECK(ctx.out[1].retry_after_s >= 3590 && ctx.out[1].retry_after_s <= 3600);
    /* The excerpt keeps max_response_bytes. */
    CHECK(ctx.out[2].status == 400 && !ctx.out[2].has_error);
    CHECK(strcmp(ctx.out[2].excerpt, "0123456789abcdef") == 0);
    /* A huge body is cut off, but the status stands. */
    CHECK(ctx.out[3].status == 200 && !ctx.out[3].has_error);
    CHECK(strcmp(ctx.out[3].excerpt, "zzzzzzzzzzzzzzzz") == 0);
    CHECK(ctx.out[3].retry_after_s == -1);
    /* A redirect is not followed: the 302 is the answer. */
    CHECK(ctx.out[4].status == 302 && !ctx.out[4].has_error);
    CHECK(ctx.out[4].excerpt[0] == '\0');

    /* Status line arrives, body stalls past the total timeout: the status is
     * the receiver's answer, so it is reported without an error. */
    {
        crier_webhook_sender *keep = ctx.sender;
        reset_ctx(&ctx);
        ctx.sender = keep;
    }
    snprintf(url, sizeof url, "http://127.0.0.1:%d/stall", port);
    req.url = url;
    req.token = 0;
    CHECK(send_req(&ctx, &req) == 0);
    run_loop(&ctx, 1, 5.0);
    CHECK(ctx.completed == 1);
    CHECK(ctx.out[0].status == 202 && !ctx.out[0].has_error);
    CHECK(strcmp(ctx.out[0].excerpt, "partial") == 0);
    crier_webhook_sender_free(ctx.sender);

    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void bench_send_next(test_ctx *c)
{
    crier_webhook_request req;
    char id[64], body[96];
    int i = c->bench_next++;

    snprintf(id, sizeof id, "msg_bench_%d", i);
    snprintf(body, sizeof body, "{\"n\":%d}", i);
    memset(&req, 0, sizeof req);
    req.token = i;
    req.url = c->bench_url;
    req.body = body;
    req.body_len = strlen(body);
    req.webhook_id = id;
    req.secret = TEST_SECRET;
    if (crier_webhook_send(c->sender, &req) != 0) {
        fprintf(stderr, "bench send %d refused\n", i);
        check_failures++;
    }
}

/* Process CPU seconds (user + system) so far. */
static double cpu_seconds(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* A cached connection the receiver closes while it is idle: the watcher curl_ev
 * keeps on it between transfers (parked) must not spin the loop on the
 * readable end of file, and the next request must go through on a new
 * connection. */
static void test_idle_close(void)
{
    crier_webhook_request req;
    char url[128];
    int port = 0, i;
    double cpu;
    pid_t pid = raw_server_start(&port);

    CHECK(pid > 0);
    if (pid <= 0)
        return;
    reset_ctx(&ctx);
    ctx.sender = crier_webhook_sender_new(ctx.loop, &loopback_opts, on_done, &ctx);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/idle-close", port);
    req = empty_body_request(url, "msg_idle_close");
    for (i = 0; i < 3; i++) {
        req.token = i;
        CHECK(send_req(&ctx, &req) == 0);
        run_loop(&ctx, i + 1, 10.0);
        CHECK(ctx.completed == i + 1);
        CHECK(ctx.out[i].status == 204 && !ctx.out[i].has_error);
        /* idle for 300 ms while the closed connection waits in curl's cache */
        cpu = cpu_seconds();
        run_loop(&ctx, 0, 0.3);
        CHECK(cpu_seconds() - cpu < 0.15);
    }
    crier_webhook_sender_free(ctx.sender);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void test_throughput(const char *dir)
{
    receiver r = {0};
    crier_webhook_options opts = {0};
    char url[128];
    int total = 2000, window = 32, i, ok = 0, lines = 0;
    double t0, t1;
    FILE *f;
    char buf[4096];

    CHECK(receiver_start(&r, dir, "bench", "204", NULL, NULL) == 0);
    if (!r.port)
        return;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/bench", r.port);
    reset_ctx(&ctx);
    opts.allow_targets = CRIER_TARGET_ALLOW_LOOPBACK;
    opts.max_inflight = window;
    ctx.sender = crier_webhook_sender_new(ctx.loop, &opts, on_done, &ctx);
    ctx.bench_total = total;
    ctx.bench_url = url;
    t0 = now_ms();
    for (i = 0; i < window; i++)
        bench_send_next(&ctx);
    run_loop(&ctx, total, 60.0);
    t1 = now_ms();
    CHECK(ctx.completed == total);
    for (i = 0; i < total; i++)
        ok += ctx.out[i].calls == 1 && ctx.out[i].status == 204;
    CHECK(ok == total);
    f = fopen(r.log_path, "r");
    while (f && fgets(buf, sizeof buf, f))
        lines++;
    if (f)
        fclose(f);
    CHECK(lines == total);
    printf("throughput: %d signed POSTs, %d in flight, %.0f ms, %.0f requests/s\n", total, window,
           t1 - t0, total * 1000.0 / (t1 - t0));
    crier_webhook_sender_free(ctx.sender);
    receiver_stop(&r);
}

/* ---- several secrets, the SSRF guard, the body limit ---------------------- */

#define SECOND_SECRET "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

/* The Standard Webhooks signature of (id, ts, body) under a "whsec_" secret,
 * computed independently of webhook.c: OpenSSL's base64 and one-shot HMAC. */
static void expected_sig(const char *whsec, const char *id, long long ts, const char *body,
                         size_t body_len, char out[64])
{
    const char *b64 = whsec + 6;
    size_t b64_len = strlen(b64), msg_len;
    unsigned char key[128], mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    int key_len = EVP_DecodeBlock(key, (const unsigned char *)b64, (int)b64_len);
    char *msg = malloc(strlen(id) + 48 + body_len);

    if (!msg)
        abort();
    while (b64_len > 0 && b64[b64_len - 1] == '=') { /* DecodeBlock counts padding as zero bytes */
        b64_len--;
        key_len--;
    }
    msg_len = (size_t)sprintf(msg, "%s.%lld.", id, ts);
    memcpy(msg + msg_len, body, body_len);
    msg_len += body_len;
    if (key_len <= 0 || !HMAC(EVP_sha256(), key, key_len, (unsigned char *)msg, msg_len, mac, &mac_len) ||
        mac_len != 32) {
        fprintf(stderr, "expected_sig: HMAC failed\n");
        check_failures++;
        out[0] = '\0';
    } else {
        memcpy(out, "v1,", 3);
        EVP_EncodeBlock((unsigned char *)out + 3, mac, 32);
    }
    free(msg);
}

/* Calls crier_webhook_send with stderr captured into buf (the warnings it logs). */
static int send_capturing_log(test_ctx *c, const crier_webhook_request *req, const char *dir, char *buf,
                              size_t buf_len)
{
    char path[600];
    int saved, fd, rc;
    FILE *f;
    size_t n = 0;

    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    crier_log_set_level(CRIER_LOG_WARN);
    fflush(stderr);
    saved = dup(2);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    rc = send_req(c, req);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    crier_log_set_level(CRIER_LOG_INFO);
    crier_log_init_from_env();
    buf[0] = '\0';
    f = fopen(path, "r");
    if (f) {
        n = fread(buf, 1, buf_len - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return rc;
}

static void test_sign_all(const char *dir)
{
    char out[CRIER_WEBHOOK_SIGNATURES_LEN], a[64], b[64], want[2 * 64], list[1024];
    const char *body = "{\"test\": 2432232314}";
    int bad = -5, i;

    /* One secret: the Standard Webhooks test vector. */
    CHECK(crier_webhook_sign_all(TEST_SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, 20, out,
                                 sizeof out, &bad) == 1);
    CHECK_STR(out, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    CHECK(bad == 0);

    /* Two secrets, in order, checked against OpenSSL directly. */
    expected_sig(TEST_SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, 20, a);
    expected_sig(SECOND_SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, 20, b);
    CHECK_STR(a, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    snprintf(want, sizeof want, "%s %s", a, b);
    CHECK(crier_webhook_sign_all(TEST_SECRET " " SECOND_SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                                 body, 20, out, sizeof out, &bad) == 2);
    CHECK_STR(out, want);
    /* Any whitespace run separates; leading and trailing blanks are ignored. */
    CHECK(crier_webhook_sign_all(" \t" TEST_SECRET "\n\t  " SECOND_SECRET "  \n", "msg_p5jXN8AQM9LWM0D4loKWxJek",
                                 1614265330, body, 20, out, sizeof out, &bad) == 2);
    CHECK_STR(out, want);
    snprintf(want, sizeof want, "%s %s", b, a);
    CHECK(crier_webhook_sign_all(SECOND_SECRET " " TEST_SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                                 body, 20, out, sizeof out, &bad) == 2);
    CHECK_STR(out, want);

    /* Unusable secrets: their 1-based position comes back. */
    CHECK(crier_webhook_sign_all(TEST_SECRET " whsec_not*base64", "id", 1, "{}", 2, out, sizeof out, &bad) == -1);
    CHECK(bad == 2 && out[0] == '\0');
    CHECK(crier_webhook_sign_all("whsec_!!! " TEST_SECRET, "id", 1, "{}", 2, out, sizeof out, &bad) == -1);
    CHECK(bad == 1);
    CHECK(crier_webhook_sign_all(TEST_SECRET " whsec_", "id", 1, "{}", 2, out, sizeof out, &bad) == -1);
    CHECK(bad == 2);
    CHECK(crier_webhook_sign_all(TEST_SECRET " " SECOND_SECRET " rawkey", "id", 1, "{}", 2, out, sizeof out,
                                 &bad) == -1);
    CHECK(bad == 3);
    CHECK(crier_webhook_sign_all("whsec_QUJD=", "id", 1, "{}", 2, out, sizeof out, &bad) == -1);
    CHECK(bad == 1);
    /* Up to CRIER_WEBHOOK_MAX_SECRETS, and the buffer bound holds. */
    list[0] = '\0';
    for (i = 0; i < CRIER_WEBHOOK_MAX_SECRETS; i++)
        strcat(strcat(list, i ? " " : ""), i % 2 ? SECOND_SECRET : TEST_SECRET);
    CHECK(crier_webhook_sign_all(list, "id", 1, "{}", 2, out, sizeof out, &bad) == CRIER_WEBHOOK_MAX_SECRETS);
    CHECK(strlen(out) == CRIER_WEBHOOK_SIGNATURES_LEN - 1);
    strcat(list, " " TEST_SECRET);
    CHECK(crier_webhook_sign_all(list, "id", 1, "{}", 2, out, sizeof out, &bad) == -1);
    CHECK(bad == 0);
    CHECK(crier_webhook_sign_all(TEST_SECRET " " SECOND_SECRET, "id", 1, "{}", 2, out, 60, &bad) == -1);
    CHECK(bad == 0);
    CHECK(crier_webhook_sign_all(NULL, "id", 1, "{}", 2, out, sizeof out, &bad) == -1);
    /* A string without the prefix stays one raw key, blanks included. */
    CHECK(crier_webhook_sign_all("ABCD", "id", 1, "{}", 2, out, sizeof out, NULL) == 1);
    CHECK(crier_webhook_sign("whsec_QUJDRA==", "id", 1, "{}", 2, a, sizeof a) == 0);
    CHECK_STR(out, a);
    CHECK(crier_webhook_sign_all("my raw key", "id", 1, "{}", 2, out, sizeof out, NULL) == 1);
    CHECK(crier_webhook_sign("my raw key", "id", 1, "{}", 2, a, sizeof a) == 0);
    CHECK_STR(out, a);

    /* crier_webhook_send refuses a list with a bad secret and logs its
     * position, never a secret. */
    {
        crier_webhook_request req;
        char log[4096];

        reset_ctx(&ctx);
        ctx.sender = crier_webhook_sender_new(ctx.loop, &loopback_opts, on_done, &ctx);
        req = empty_body_request("http://127.0.0.1:1/", "msg_bad_secret");
        req.secret = TEST_SECRET " whsec_SECRETVALUE*";
        CHECK(send_capturing_log(&ctx, &req, dir, log, sizeof log) == -1);
        CHECK(strstr(log, "secret 2 of the list is not usable") != NULL);
        CHECK(strstr(log, "SECRETVALUE") == NULL);
        CHECK(strstr(log, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == NULL);
        CHECK(crier_webhook_inflight(ctx.sender) == 0);
        crier_webhook_sender_free(ctx.sender);
    }
}

/* Two secrets during a rotation: the receiver verifies every signature itself
 * (receiver.py --secrets, Python's hmac), and the header is compared exactly
 * with HMACs computed here through OpenSSL. */
static void test_two_secrets(const char *dir)
{
    static const struct {
        const char *secret;
        const char *first, *second; /* expected order in the header */
        const char *verified;       /* what receiver.py reports */
    } cases[] = {
        {TEST_SECRET " " SECOND_SECRET, TEST_SECRET, SECOND_SECRET, "1,2"},
        {" \t" SECOND_SECRET "\n  " TEST_SECRET " ", SECOND_SECRET, TEST_SECRET, "1,2"},
        {TEST_SECRET, TEST_SECRET, NULL, "1"},
        {SECOND_SECRET, SECOND_SECRET, NULL, "2"},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    receiver r = {0};
    crier_webhook_request req;
    char url[128], id[64], body[64];
    int i, lines = 0;
    FILE *f;
    char *line = NULL;
    size_t cap = 0;

    if (receiver_and_sender(&r, dir, "rotation", "204", TEST_SECRET " " SECOND_SECRET, "/rotation", url, sizeof url) != 0)
        return;
    for (i = 0; i < N; i++) {
        memset(&req, 0, sizeof req);
        snprintf(id, sizeof id, "msg_rotation_%d", i);
        snprintf(body, sizeof body, "{\"n\":%d,\"s\":\"h\xc3\xa9\"}", i);
        req.token = i;
        req.url = url;
        req.body = body;
        req.body_len = strlen(body);
        req.webhook_id = id;
        req.secret = cases[i].secret;
        req.timestamp = 1700000100 + i;
        CHECK(send_req(&ctx, &req) == 0);
    }
    run_loop(&ctx, N, 10.0);
    CHECK(ctx.completed == N);
    for (i = 0; i < N; i++)
        CHECK(ctx.out[i].calls == 1 && ctx.out[i].status == 204 && !ctx.out[i].has_error);

    f = fopen(r.log_path, "r");
    CHECK(f != NULL);
    while (f && getline(&line, &cap, f) > 0) {
        char *hid = json_get(line, "webhook-id"), *sig = json_get(line, "webhook-signature");
        char *ts = json_get(line, "webhook-timestamp"), *got = json_get(line, "body");
        char *verified = json_get(line, "verified_secrets");
        char a[64], b[64], want[160];
        int k = -1;

        lines++;
        CHECK(hid && sscanf(hid, "msg_rotation_%d", &k) == 1 && k >= 0 && k < N);
        if (hid && got && ts && k >= 0 && k < N) {
            CHECK(atoll(ts) == 1700000100LL + k);
            expected_sig(cases[k].first, hid, atoll(ts), got, strlen(got), a);
            if (cases[k].second) {
                expected_sig(cases[k].second, hid, atoll(ts), got, strlen(got), b);
                snprintf(want, sizeof want, "%s %s", a, b);
            } else {
                snprintf(want, sizeof want, "%s", a);
            }
            CHECK_STR(sig, want);
            CHECK_STR(verified, cases[k].verified);
        }
        free(hid), free(sig), free(ts), free(got), free(verified);
    }
    CHECK(lines == N);
    free(line);
    if (f)
        fclose(f);
    crier_webhook_sender_free(ctx.sender);
    receiver_stop(&r);
}

/* One sender, one request at a time, so each reuses the pooled handle of the
 * one before (its options are set once, its headers and body rebuilt in
 * place): bodies long and short and empty, ids long and short, with and
 * without a secret must each reach the receiver exactly as sent, with no
 * header or byte left over from the request before. */
static void test_pooled_reuse(const char *dir)
{
    enum { N = 6 };
    static char bodies[N][4096];
    static char ids[N][520];
    receiver r = {0};
    crier_webhook_request req;
    char url[128];
    int i, lines = 0;
    FILE *f;
    char *line = NULL;
    size_t cap = 0;

    if (receiver_and_sender(&r, dir, "reuse", "204", NULL, "/reuse", url, sizeof url) != 0)
        return;
    for (i = 0; i < N; i++) {
        size_t len = i % 2 == 0 ? 3000 - (size_t)i * 100 : (size_t)i * 3;

        /* even: a long body, a 512-byte id, signed; odd: short, unsigned; the last: empty */
        if (i == N - 1)
            len = 0;
        memset(bodies[i], 'a' + i, len);
        bodies[i][len] = '\0';
        if (i % 2 == 0) {
            int n = snprintf(ids[i], sizeof ids[i], "msg_reuse_%d_", i);
            memset(ids[i] + n, 'x', 512 - (size_t)n);
            ids[i][512] = '\0';
        } else {
            snprintf(ids[i], sizeof ids[i], "msg_reuse_%d", i);
        }
        memset(&req, 0, sizeof req);
        req.token = i;
        req.url = url;
        req.body = bodies[i];
        req.body_len = len;
        req.webhook_id = ids[i];
        req.secret = i % 2 == 0 ? TEST_SECRET : NULL;
        req.timestamp = 1700000200 + i;
        CHECK(send_req(&ctx, &req) == 0);
        run_loop(&ctx, i + 1, 10.0);
        CHECK(ctx.completed == i + 1);
        CHECK(ctx.out[i].calls == 1 && ctx.out[i].status == 204 && !ctx.out[i].has_error);
    }

    f = fopen(r.log_path, "r");
    CHECK(f != NULL);
    while (f && getline(&line, &cap, f) > 0) {
        char *hid = json_get(line, "webhook-id"), *sig = json_get(line, "webhook-signature");
        char *ts = json_get(line, "webhook-timestamp"), *got = json_get(line, "body");
        char *idem = json_get(line, "idempotency-key"), *ctype = json_get(line, "content-type");
        char want[64];
        int k = -1;

        lines++;
        CHECK(hid && sscanf(hid, "msg_reuse_%d", &k) == 1 && k >= 0 && k < N);
        if (hid && k >= 0 && k < N) {
            CHECK_STR(hid, ids[k]);
            CHECK_STR(idem, ids[k]);
            CHECK_STR(got, bodies[k]);
            CHECK_STR(ctype, "application/json");
            CHECK(ts && atoll(ts) == 1700000200LL + k);
            if (k % 2 == 0) {
                CHECK(crier_webhook_sign(TEST_SECRET, ids[k], 1700000200LL + k, bodies[k],
                                         strlen(bodies[k]), want, sizeof want) == 0);
                CHECK_STR(sig, want);
            } else {
                CHECK(sig == NULL);
            }
        }
        free(hid), free(sig), free(ts), free(got), free(idem), free(ctype);
    }
    CHECK(lines == N);
    free(line);
    if (f)
        fclose(f);
    crier_webhook_sender_free(ctx.sender);
    receiver_stop(&r);
}

/* True when a connection is waiting on the listening socket fd. */
static int connection_pending(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return poll(&p, 1, 0) > 0;
}

static off_t file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? st.st_size : -1;
}

static void test_guard(const char *dir)
{
    static const struct {
        const char *url;   /* %d: the port of a listener that never accepts */
        unsigned allow;
        const char *error; /* expected in the result's error, after "refused: " */
    } cases[] = {
        {"http://127.0.0.1:%d/", 0,
         "refused: 127.0.0.1 is a loopback address; allow it with --allow-targets loopback"},
        {"http://127.0.0.1:%d/", CRIER_TARGET_ALLOW_PRIVATE | CRIER_TARGET_ALLOW_LINK_LOCAL,
         "refused: 127.0.0.1 is a loopback address; allow it with --allow-targets loopback"},
        {"https://127.0.0.1:%d/", 0,
         "refused: 127.0.0.1 is a loopback address; allow it with --allow-targets loopback"},
        {"http://127.1:%d/", 0, "refused: 127.0.0.1 is a loopback address"},
        {"http://2130706433:%d/", 0, "refused: 127.0.0.1 is a loopback address"},
        /* localhost: ::1 or 127.0.0.1, whichever curl tries first */
        {"http://localhost:%d/", CRIER_TARGET_ALLOW_PRIVATE,
         " is a loopback address; allow it with --allow-targets loopback"},
        {"http://[::1]:%d/", 0, "refused: ::1 is a loopback address; allow it with --allow-targets loopback"},
        {"http://[::ffff:127.0.0.1]:%d/", 0,
         "refused: ::ffff:127.0.0.1 is a loopback address; allow it with --allow-targets loopback"},
        {"http://0.0.0.0:%d/", 7, "refused: 0.0.0.0 is a special-purpose address, never allowed"},
        {"http://[::]:%d/", 7, "refused: :: is a special-purpose address, never allowed"},
        {"http://169.254.169.254:%d/latest/meta-data/", CRIER_TARGET_ALLOW_LOOPBACK | CRIER_TARGET_ALLOW_PRIVATE,
         "refused: 169.254.169.254 is a link-local address; allow it with --allow-targets link-local"},
        {"http://10.255.255.1:%d/", CRIER_TARGET_ALLOW_LOOPBACK,
         "refused: 10.255.255.1 is a private address; allow it with --allow-targets private"},
    };
    receiver r = {0};
    crier_webhook_options opts = {0};
    crier_webhook_request req;
    char url[160];
    int lport = 0, lfd = listen_local(&lport);
    size_t i;

    CHECK(lfd >= 0);
    CHECK(receiver_start(&r, dir, "guard", "204", NULL, NULL) == 0);
    if (!r.port || lfd < 0)
        return;

    /* Default options: the receiver on 127.0.0.1 is refused, and nothing
     * reaches it. */
    reset_ctx(&ctx);
    ctx.sender = crier_webhook_sender_new(ctx.loop, NULL, on_done, &ctx);
    memset(&req, 0, sizeof req);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", r.port);
    req.url = url;
    req.body = "{\"secret\":\"data\"}";
    req.body_len = strlen(req.body);
    req.webhook_id = "msg_guard";
    req.secret = TEST_SECRET;
    CHECK(send_req(&ctx, &req) == 0);
    CHECK(ctx.completed == 0);
    run_loop(&ctx, 1, 5.0);
    CHECK(ctx.completed == 1);
    CHECK(ctx.reentrant_calls == 0);
    CHECK(ctx.out[0].calls == 1);
    CHECK(ctx.out[0].refused == 1);
    CHECK(ctx.out[0].status == 0);
    CHECK(ctx.out[0].timed_out == 0);
    CHECK(ctx.out[0].retry_after_s == -1);
    CHECK(ctx.out[0].duration_ms < 1000.0);
    CHECK_STR(ctx.out[0].error, "refused: 127.0.0.1 is a loopback address; allow it with --allow-targets loopback");
    CHECK(crier_webhook_inflight(ctx.sender) == 0);
    run_loop(&ctx, 0, 0.3); /* time for anything that did leave to arrive */
    CHECK(file_size(r.log_path) == 0);

    /* The same sender (its pooled handle) refuses again; a sender that
     * allows loopback gets through to the same receiver. */
    {
        crier_webhook_sender *keep = ctx.sender;
        reset_ctx(&ctx);
        ctx.sender = keep;
    }
    CHECK(send_req(&ctx, &req) == 0);
    run_loop(&ctx, 1, 5.0);
    CHECK(ctx.completed == 1 && ctx.out[0].refused == 1);
    crier_webhook_sender_free(ctx.sender);
    reset_ctx(&ctx);
    ctx.sender = crier_webhook_sender_new(ctx.loop, &loopback_opts, on_done, &ctx);
    CHECK(send_req(&ctx, &req) == 0);
    run_loop(&ctx, 1, 5.0);
    CHECK(ctx.completed == 1 && ctx.out[0].status == 204 && !ctx.out[0].has_error);
    CHECK(ctx.out[0].refused == 0);
    CHECK(file_size(r.log_path) > 0);
    crier_webhook_sender_free(ctx.sender);
    receiver_stop(&r);

    /* Every spelling of a forbidden address, against a listener that never
     * accepts: each is refused, and no connection ever arrives. */
    crier_log_set_level(CRIER_LOG_ERROR); /* each refusal warns by design */
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reset_ctx(&ctx);
        opts.allow_targets = cases[i].allow;
        opts.connect_timeout_ms = 2000;
        ctx.sender = crier_webhook_sender_new(ctx.loop, &opts, on_done, &ctx);
        snprintf(url, sizeof url, cases[i].url, lport);
        req.url = url;
        req.token = 0;
        CHECK(send_req(&ctx, &req) == 0);
        run_loop(&ctx, 1, 5.0);
        if (ctx.completed != 1 || ctx.out[0].refused != 1 || ctx.out[0].status != 0 ||
            strncmp(ctx.out[0].error, "refused: ", 9) != 0 || !strstr(ctx.out[0].error, cases[i].error)) {
            fprintf(stderr, "guard %s (allow %u): completed %d refused %d status %ld error \"%s\"\n", url,
                    cases[i].allow, ctx.completed, ctx.out[0].refused, ctx.out[0].status, ctx.out[0].error);
            check_failures++;
        }
        crier_webhook_sender_free(ctx.sender);
    }
    crier_log_set_level(CRIER_LOG_INFO);
    crier_log_init_from_env();
    CHECK(!connection_pending(lfd));
    close(lfd);
}

static void test_body_limit(const char *dir)
{
    receiver r = {0};
    crier_webhook_options opts = {0};
    crier_webhook_request req;
    char url[128], small[65], log[4096];
    char *big;
    size_t mib = CRIER_WEBHOOK_DEFAULT_MAX_BODY_BYTES;
    int lines = 0;
    FILE *f;
    char *line = NULL;
    size_t cap = 0;

    CHECK(CRIER_WEBHOOK_DEFAULT_MAX_BODY_BYTES == 1048576);
    CHECK(receiver_start(&r, dir, "limit", "204", NULL, NULL) == 0);
    if (!r.port)
        return;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/limit", r.port);

    /* A small limit: at the limit goes, one byte over is refused and logged. */
    reset_ctx(&ctx);
    opts.allow_targets = CRIER_TARGET_ALLOW_LOOPBACK;
    opts.max_body_bytes = 64;
    ctx.sender = crier_webhook_sender_new(ctx.loop, &opts, on_done, &ctx);
    memset(small, 'a', 64);
    small[64] = '\0';
    memset(&req, 0, sizeof req);
    req.url = url;
    req.webhook_id = "msg_limit";
    req.secret = TEST_SECRET;
    req.body = small;
    req.body_len = 65; /* includes the NUL: one byte over */
    CHECK(send_capturing_log(&ctx, &req, dir, log, sizeof log) == -1);
    CHECK(strstr(log, "body is 65 bytes, over the limit of 64") != NULL);
    CHECK(crier_webhook_inflight(ctx.sender) == 0);
    req.body_len = 64;
    CHECK(send_req(&ctx, &req) == 0);
    run_loop(&ctx, 1, 5.0);
    CHECK(ctx.completed == 1 && ctx.out[0].status == 204);
    crier_webhook_sender_free(ctx.sender);

    /* The default limit is 1 MiB. */
    big = malloc(mib + 1);
    if (!big)
        abort();
    memset(big, 'b', mib + 1);
    reset_ctx(&ctx);
    opts.max_body_bytes = 0;
    ctx.sender = crier_webhook_sender_new(ctx.loop, &opts, on_done, &ctx);
    req.body = big;
    req.body_len = mib + 1;
    req.token = 1;
    CHECK(send_capturing_log(&ctx, &req, dir, log, sizeof log) == -1);
    CHECK(strstr(log, "body is 1048577 bytes, over the limit of 1048576") != NULL);
    req.body_len = mib;
    CHECK(send_req(&ctx, &req) == 0);
    run_loop(&ctx, 1, 10.0);
    CHECK(ctx.completed == 1 && ctx.out[1].status == 204);
    crier_webhook_sender_free(ctx.sender);
    free(big);

    /* The receiver saw the two bodies that were allowed, whole. */
    f = fopen(r.log_path, "r");
    CHECK(f != NULL);
    while (f && getline(&line, &cap, f) > 0) {
        char *body = json_get(line, "body");
        lines++;
        CHECK(body && (strlen(body) == 64 || strlen(body) == mib));
        free(body);
    }
    CHECK(lines == 2);
    free(line);
    if (f)
        fclose(f);
    receiver_stop(&r);
}

int main(void)
{
    char dir[] = "/tmp/crier-test-webhook-XXXXXX";
    char cmd[128];

    signal(SIGPIPE, SIG_IGN);
    crier_log_init_from_env();
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "curl_global_init failed\n");
        return 1;
    }
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    ctx.loop = ev_loop_new(EVFLAG_AUTO);

    test_sign();
    test_sign_all(dir);
    crier_log_set_level(CRIER_LOG_ERROR); /* the refusals below warn by design */
    test_refusals();
    crier_log_set_level(CRIER_LOG_INFO);
    crier_log_init_from_env();
    test_batch(dir);
    test_timeout_and_limits(dir);
    test_refused();
    test_raw_responses();
    test_idle_close();
    test_two_secrets(dir);
    test_pooled_reuse(dir);
    test_guard(dir);
    test_body_limit(dir);
    test_throughput(dir);

    ev_loop_destroy(ctx.loop);
    curl_global_cleanup();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (check_failures == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (check_failures) {
        fprintf(stderr, "test_webhook: %d check(s) failed (logs in %s)\n", check_failures, dir);
        return 1;
    }
    printf("test_webhook: ok\n");
    return 0;
}
