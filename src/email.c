/* email.c — the email channel's sender: formats one RFC 5322 / MIME message per
 * notification and submits it over SMTP through libcurl's multi interface,
 * driven entirely by a libev loop (one ev_io per socket curl asks about, one
 * ev_timer for curl's timeout). The multi handle's connection cache lets
 * consecutive messages to the same relay reuse a connection.
 *
 * The message is deterministic for a given input apart from its Date header:
 * Message-ID "<{message_id}@{domain}>", and a MIME boundary "=_crier_<FNV-1a of
 * the id>" — "=_" can never appear in quoted-printable text, so the boundary
 * needs no collision check. Bodies are quoted-printable with soft breaks at 76
 * columns and a leading '.' encoded as =2E (curl dot-stuffs too; this keeps the
 * message safe on any transport). Subjects and display names that are not
 * plain short ASCII become RFC 2047 encoded words (=?UTF-8?B?…?=, ≤ 75 bytes
 * each, never splitting a UTF-8 sequence), folded onto continuation lines.
 *
 * Classification: a 5xx reply is permanent, except the authentication and TLS
 * policy replies (530, 534, 535, 538) and curl's "login denied", which are the
 * relay's configuration, not the message; 4xx replies, connection
 * failures and timeouts are transient; every CURLE_OPERATION_TIMEDOUT sets
 * timed_out (ambiguous: the message may have been accepted). The sender may be
 * freed from inside a done callback (it is destroyed once dispatch unwinds).
 *
 * Shutdown: libcurl says QUIT on every cached SMTP connection when the multi
 * handle is cleaned up and waits for the reply, blocking for up to two minutes
 * if the relay hangs. The sender opens its sockets itself (open/close socket
 * callbacks) and shuts them down before cleanup, so freeing never waits on a
 * server. */
#include "email.h"

#include "log.h"

#include <curl/curl.h>
#include <ev.h>

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <sys/socket.h>

#define EMAIL_DEFAULT_CONNECT_TIMEOUT_MS 10000L
#define EMAIL_DEFAULT_TOTAL_TIMEOUT_MS 60000L
#define EMAIL_DEFAULT_MAX_INFLIGHT 64
#define EMAIL_DEFAULT_DOMAIN "crier.invalid"

#define EMAIL_MAX_ID_LEN 200
#define EMAIL_MAX_DOMAIN_LEN 253
#define EMAIL_MAX_ADDRESS_LEN 254
/* ASCII subjects up to this length go out as they are; longer ones are encoded
 * (and thereby folded) so no header line approaches 998 bytes. */
#define EMAIL_MAX_RAW_SUBJECT 900
/* Display names up to this length are sent as a quoted string. */
#define EMAIL_MAX_RAW_NAME 200
/* Bytes of UTF-8 per encoded word: base64 of 45 bytes is 60 characters, plus
 * the 12 of "=?UTF-8?B?" and "?=" makes 72 ≤ 75. */
#define EMAIL_WORD_BYTES 45
/* Quoted-printable line length before the soft-break '='. */
#define EMAIL_QP_COLUMNS 75

/* ---- a growable output buffer -------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
    int oom;
} email_buf;

static void email_buf_add(email_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        char *d;

        while (cap < b->len + n + 1)
            cap *= 2;
        d = realloc(b->data, cap);
        if (!d) {
            b->oom = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void email_buf_puts(email_buf *b, const char *s)
{
    email_buf_add(b, s, strlen(s));
}

static void email_buf_printf(email_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void email_buf_printf(email_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = 1; /* only used for short, bounded lines */
        return;
    }
    email_buf_add(b, tmp, (size_t)n);
}

static void email_set_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void email_set_err(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;

    if (!err || err_len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* ---- validation and cleaning --------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if p does not start one
 * (overlong forms, surrogates and code points above U+10FFFF are invalid). p is
 * NUL-terminated, so a truncated sequence stops at the NUL. */
static size_t email_utf8_len(const unsigned char *p)
{
    unsigned c = p[0];

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return (p[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        if ((p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0))
            return 0;
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if ((p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))
            return 0;
        return 4;
    }
    return 0;
}

/* Returns a malloc'd copy of s (NULL counts as "") fit for a header value:
 * control characters (CR, LF, TAB, other C0, DEL) become spaces and invalid
 * UTF-8 becomes U+FFFD. NULL when out of memory. */
static char *email_clean_text(const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t n = strlen((const char *)p);
    char *out = malloc(3 * n + 1); /* an invalid byte grows to 3 */
    size_t o = 0;

    if (!out)
        return NULL;
    while (*p) {
        size_t len = email_utf8_len(p);

        if (len == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            p++;
        } else if (len == 1) {
            out[o++] = (*p < 0x20 || *p == 0x7f) ? ' ' : (char)*p;
            p++;
        } else {
            memcpy(out + o, p, len);
            o += len;
            p += len;
        }
    }
    out[o] = '\0';
    return out;
}

/* True when s is printable ASCII (0x20-0x7e) without the "=?" that starts an
 * encoded word. */
static int email_is_plain_ascii(const char *s)
{
    const unsigned char *p;

    for (p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            return 0;
    return strstr(s, "=?") == NULL;
}

/* Checks an addr-spec: 3..254 bytes of printable ASCII without spaces or the
 * specials that could end or extend an address, exactly one '@' with text on
 * both sides. Returns 0 or -1 with a message in err. */
static int email_check_address(const char *a, const char *what, char *err, size_t err_len)
{
    const unsigned char *p;
    const char *at;
    size_t len;

    if (!a || !*a) {
        email_set_err(err, err_len, "%s address is missing", what);
        return -1;
    }
    len = strlen(a);
    if (len > EMAIL_MAX_ADDRESS_LEN) {
        email_set_err(err, err_len, "%s address is longer than %d bytes", what,
                      EMAIL_MAX_ADDRESS_LEN);
        return -1;
    }
    for (p = (const unsigned char *)a; *p; p++) {
        if (*p <= 0x20 || *p >= 0x7f || strchr("<>\"(),;:\\[]", *p)) {
            email_set_err(err, err_len,
                          "%s address has a forbidden character (control, space, non-ASCII "
                          "or one of <>\"(),;:\\[])",
                          what);
            return -1;
        }
    }
    at = strchr(a, '@');
    if (!at || at == a || at[1] == '\0' || strchr(at + 1, '@')) {
        email_set_err(err, err_len,
                      "%s address must have exactly one '@' between a local "
                      "part and a domain",
                      what);
        return -1;
    }
    return 0;
}

/* True when s is 1..max bytes, each from [A-Za-z0-9] or extra. */
static int email_is_token(const char *s, size_t max, const char *extra)
{
    const unsigned char *p;
    size_t len;

    if (!s)
        return 0;
    len = strlen(s);
    if (len == 0 || len > max)
        return 0;
    for (p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))
            continue;
        if (!strchr(extra, *p))
            return 0;
    }
    return 1;
}

/* ---- encodings ----------------------------------------------------------- */

static void email_put_base64(email_buf *b, const unsigned char *in, size_t len)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char quad[4];
    size_t i;

    for (i = 0; i < len; i += 3) {
        unsigned long v = (unsigned long)in[i] << 16;

        if (i + 1 < len)
            v |= (unsigned long)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        quad[0] = alphabet[(v >> 18) & 63];
        quad[1] = alphabet[(v >> 12) & 63];
        quad[2] = i + 1 < len ? alphabet[(v >> 6) & 63] : '=';
        quad[3] = i + 2 < len ? alphabet[v & 63] : '=';
        email_buf_add(b, quad, 4);
    }
}

/* Appends s (clean UTF-8) as RFC 2047 encoded words of at most
 * EMAIL_WORD_BYTES bytes each, never splitting a character, separated by a
 * fold (CRLF SP). An empty s appends nothing. */
static void email_put_encoded_words(email_buf *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    int first = 1;

    while (*p) {
        size_t n = 0;

        while (p[n]) {
            size_t len = email_utf8_len(p + n);

            if (len == 0)
                len = 1; /* cannot happen on cleaned text; stay safe */
            if (n + len > EMAIL_WORD_BYTES)
                break;
            n += len;
        }
        if (!first)
            email_buf_puts(b, "\r\n ");
        email_buf_puts(b, "=?UTF-8?B?");
        email_put_base64(b, p, n);
        email_buf_puts(b, "?=");
        p += n;
        first = 0;
    }
}

/* Appends s as quoted-printable (RFC 2045 6.7): any line break (CRLF, LF or a
 * lone CR) becomes CRLF; lines are soft-broken at 76 columns; '=', controls,
 * 8-bit bytes, a space or tab before a line break and a '.' at the start of a
 * line are encoded. */
static void email_put_qp(email_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s;
    size_t col = 0;

    while (*p) {
        unsigned c = *p;
        int at_eol;
        char enc[3];

        if (c == '\r' || c == '\n') {
            if (c == '\r' && p[1] == '\n')
                p++;
            p++;
            email_buf_add(b, "\r\n", 2);
            col = 0;
            continue;
        }
        at_eol = p[1] == '\0' || p[1] == '\r' || p[1] == '\n';
        enc[0] = '=';
        enc[1] = hex[c >> 4];
        enc[2] = hex[c & 15];
        if (((c == ' ' || c == '\t') && !at_eol) || (c >= 33 && c <= 126 && c != '=')) {
            if (col + 1 > EMAIL_QP_COLUMNS) {
                email_buf_add(b, "=\r\n", 3);
                col = 0;
            }
            if (c == '.' && col == 0) {
                email_buf_add(b, enc, 3);
                col += 3;
            } else {
                email_buf_add(b, (const char *)p, 1);
                col++;
            }
        } else {
            if (col + 3 > EMAIL_QP_COLUMNS) {
                email_buf_add(b, "=\r\n", 3);
                col = 0;
            }
            email_buf_add(b, enc, 3);
            col += 3;
        }
        p++;
    }
}

/* Appends "Name: " and a mailbox: the bare address, or a display name (quoted
 * string when short plain ASCII, encoded words otherwise) and "<address>". */
static int email_put_mailbox(email_buf *b, const char *header, const char *name,
                             const char *address)
{
    char *clean = NULL;
    const char *p;

    email_buf_printf(b, "%s: ", header);
    if (!name || !*name) {
        email_buf_printf(b, "%s\r\n", address);
        return 0;
    }
    clean = email_clean_text(name);
    if (!clean)
        return -1;
    if (email_is_plain_ascii(clean) && strlen(clean) <= EMAIL_MAX_RAW_NAME) {
        email_buf_add(b, "\"", 1);
        for (p = clean; *p; p++) {
            if (*p == '"' || *p == '\\')
                email_buf_add(b, "\\", 1);
            email_buf_add(b, p, 1);
        }
        email_buf_add(b, "\"", 1);
    } else {
        email_put_encoded_words(b, clean);
    }
    email_buf_printf(b, " <%s>\r\n", address);
    free(clean);
    return 0;
}

static uint64_t email_fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Appends one body part's Content-Type and Content-Transfer-Encoding headers,
 * the blank line and the quoted-printable content, ending with CRLF. In a
 * multipart body that CRLF always belongs to the next delimiter (RFC 2046
 * 5.1.1), so content ending in a line break keeps it; a single part ends with
 * the content's own final line break, or one is added. */
static void email_put_part(email_buf *b, const char *type, const char *content, int multipart)
{
    email_buf_printf(b,
                     "Content-Type: %s; charset=UTF-8\r\n"
                     "Content-Transfer-Encoding: quoted-printable\r\n"
                     "\r\n",
                     type);
    email_put_qp(b, content);
    if (multipart || b->len < 2 || memcmp(b->data + b->len - 2, "\r\n", 2) != 0)
        email_buf_add(b, "\r\n", 2);
}

/* ---- the message --------------------------------------------------------- */

int crier_email_format(const crier_email_message *m, const crier_email_options *o, char **out,
                       size_t *out_len, char *err, size_t err_len)
{
    static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const char *domain = o && o->message_id_domain && *o->message_id_domain ? o->message_id_domain
                                                                            : EMAIL_DEFAULT_DOMAIN;
    email_buf b = {0};
    char *subject = NULL;
    char boundary[40];
    time_t when;
    struct tm tm;
    int rc = -1;

    if (!m || !out || !out_len) {
        email_set_err(err, err_len, "missing message or output");
        return -1;
    }
    if (!email_is_token(m->message_id, EMAIL_MAX_ID_LEN, "._+=-")) {
        email_set_err(err, err_len, "message_id must be 1..%d bytes of [A-Za-z0-9._+=-]",
                      EMAIL_MAX_ID_LEN);
        return -1;
    }
    if (!email_is_token(domain, EMAIL_MAX_DOMAIN_LEN, ".-")) {
        email_set_err(err, err_len, "message_id_domain must be 1..%d bytes of [A-Za-z0-9.-]",
                      EMAIL_MAX_DOMAIN_LEN);
        return -1;
    }
    if (email_check_address(m->from_address, "from", err, err_len) != 0 ||
        email_check_address(m->to_address, "to", err, err_len) != 0)
        return -1;
    if (!m->text && !m->html) {
        email_set_err(err, err_len, "message has neither a text nor an html part");
        return -1;
    }

    when = m->date ? (time_t)m->date : time(NULL);
    if (!gmtime_r(&when, &tm)) {
        email_set_err(err, err_len, "date out of range");
        return -1;
    }
    subject = email_clean_text(m->subject);
    if (!subject)
        goto oom;

    if (email_put_mailbox(&b, "From", m->from_name, m->from_address) != 0 ||
        email_put_mailbox(&b, "To", m->to_name, m->to_address) != 0)
        goto oom;
    email_buf_puts(&b, "Subject: ");
    if (email_is_plain_ascii(subject) && strlen(subject) <= EMAIL_MAX_RAW_SUBJECT)
        email_buf_puts(&b, subject);
    else
        email_put_encoded_words(&b, subject);
    email_buf_puts(&b, "\r\n");
    email_buf_printf(&b, "Date: %s, %02d %s %04d %02d:%02d:%02d +0000\r\n", days[tm.tm_wday],
                     tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                     tm.tm_sec);
    email_buf_printf(&b, "Message-ID: <%s@%s>\r\n", m->message_id, domain);
    email_buf_printf(&b, "Idempotency-Key: %s\r\n", m->message_id);
    email_buf_printf(&b, "X-Crier-Notification: %s\r\n", m->message_id);
    email_buf_puts(&b, "Auto-Submitted: auto-generated\r\n");
    email_buf_puts(&b, "MIME-Version: 1.0\r\n");

    if (m->text && m->html) {
        snprintf(boundary, sizeof boundary, "=_crier_%016" PRIx64, email_fnv1a(m->message_id));
        email_buf_printf(&b, "Content-Type: multipart/alternative; boundary=\"%s\"\r\n\r\n",
                         boundary);
        email_buf_printf(&b, "--%s\r\n", boundary);
        email_put_part(&b, "text/plain", m->text, 1);
        email_buf_printf(&b, "--%s\r\n", boundary);
        email_put_part(&b, "text/html", m->html, 1);
        email_buf_printf(&b, "--%s--\r\n", boundary);
    } else {
        email_put_part(&b, m->text ? "text/plain" : "text/html", m->text ? m->text : m->html, 0);
    }
    if (b.oom)
        goto oom;
    *out = b.data;
    *out_len = b.len;
    b.data = NULL;
    rc = 0;
    goto cleanup;
oom:
    email_set_err(err, err_len, "out of memory");
cleanup:
    free(subject);
    free(b.data);
    return rc;
}

/* ---- the sender ---------------------------------------------------------- */

typedef struct email_transfer email_transfer;
typedef struct email_socket email_socket;

/* One SMTP transaction in flight. */
struct email_transfer {
    crier_email_sender *sender;
    email_transfer *prev, *next;
    CURL *easy;
    struct curl_slist *rcpt;
    char *msg;
    size_t msg_len, msg_off;
    int64_t delivery_id;
    double start_ms;
    char errbuf[CURL_ERROR_SIZE];
};

/* The ev_io watching one socket curl told us about. */
struct email_socket {
    ev_io io;
    crier_email_sender *sender;
    curl_socket_t fd;
    email_socket *prev, *next;
};

struct crier_email_sender {
    struct ev_loop *loop;
    CURLM *multi;
    ev_timer timer;
    crier_email_options opts;
    char *domain; /* owned copy of opts.message_id_domain */
    crier_email_done_fn done;
    void *ud;
    int inflight;
    email_transfer *active; /* doubly linked */
    email_socket *sockets;  /* doubly linked */
    curl_socket_t *fds;     /* every socket curl opened through us and has not closed */
    size_t nfds, fds_cap;
    int dispatching; /* > 0 while done callbacks may run */
    int closing;     /* free was requested from inside a done callback */
};

static double email_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void email_transfer_free(email_transfer *t)
{
    if (!t)
        return;
    if (t->easy)
        curl_easy_cleanup(t->easy);
    curl_slist_free_all(t->rcpt);
    free(t->msg);
    free(t);
}

static void email_active_unlink(crier_email_sender *s, email_transfer *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        s->active = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
}

/* CURLOPT_READFUNCTION: hands curl the next piece of the formatted message. */
static size_t email_read_cb(char *buf, size_t size, size_t nitems, void *userp)
{
    email_transfer *t = userp;
    size_t room = size * nitems;
    size_t left = t->msg_len - t->msg_off;
    size_t n = left < room ? left : room;

    memcpy(buf, t->msg + t->msg_off, n);
    t->msg_off += n;
    return n;
}

static void email_drain(crier_email_sender *s);

static void email_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    email_socket *es = w->data;
    crier_email_sender *s = es->sender;
    curl_socket_t fd = es->fd; /* es may be freed inside socket_action */
    int action = 0, running = 0;

    (void)loop;
    if (revents & EV_READ)
        action |= CURL_CSELECT_IN;
    if (revents & EV_WRITE)
        action |= CURL_CSELECT_OUT;
    if (revents & EV_ERROR)
        action |= CURL_CSELECT_ERR;
    curl_multi_socket_action(s->multi, fd, action, &running);
    email_drain(s);
}

static void email_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    crier_email_sender *s = w->data;
    int running = 0;

    (void)loop;
    (void)revents;
    curl_multi_socket_action(s->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    email_drain(s);
}

/* CURLMOPT_SOCKETFUNCTION: keeps one ev_io per socket in step with what curl
 * wants to wait for. */
static int email_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    crier_email_sender *s = userp;
    email_socket *es = socketp;
    int events = 0;

    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (es) {
            ev_io_stop(s->loop, &es->io);
            if (es->prev)
                es->prev->next = es->next;
            else
                s->sockets = es->next;
            if (es->next)
                es->next->prev = es->prev;
            free(es);
            curl_multi_assign(s->multi, fd, NULL);
        }
        return 0;
    }
    if (!es) {
        es = calloc(1, sizeof *es);
        if (!es) {
            crier_warn("email", "out of memory for a socket watcher");
            return -1;
        }
        es->sender = s;
        es->fd = fd;
        es->next = s->sockets;
        if (s->sockets)
            s->sockets->prev = es;
        s->sockets = es;
        ev_init(&es->io, email_io_cb);
        es->io.data = es;
        curl_multi_assign(s->multi, fd, es);
    } else {
        ev_io_stop(s->loop, &es->io);
    }
    if (what & CURL_POLL_IN)
        events |= EV_READ;
    if (what & CURL_POLL_OUT)
        events |= EV_WRITE;
    ev_io_set(&es->io, fd, events);
    ev_io_start(s->loop, &es->io);
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: (re)arms the single ev_timer. Never calls
 * socket_action itself; a 0 timeout fires on the next loop pass. */
static int email_curl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    crier_email_sender *s = userp;

    (void)multi;
    ev_timer_stop(s->loop, &s->timer);
    if (timeout_ms >= 0) {
        ev_timer_set(&s->timer, (double)timeout_ms / 1000.0, 0.0);
        ev_timer_start(s->loop, &s->timer);
    }
    return 0;
}

/* CURLOPT_OPENSOCKETFUNCTION: opens the socket (close-on-exec) and records it
 * so that destroy can shut it down before curl says QUIT on it. */
static curl_socket_t email_open_socket_cb(void *clientp, curlsocktype purpose,
                                          struct curl_sockaddr *addr)
{
    crier_email_sender *s = clientp;
    curl_socket_t fd;

    if (purpose != CURLSOCKTYPE_IPCXN)
        return CURL_SOCKET_BAD;
    if (s->nfds == s->fds_cap) {
        size_t cap = s->fds_cap ? 2 * s->fds_cap : 16;
        curl_socket_t *fds = realloc(s->fds, cap * sizeof *fds);

        if (!fds)
            return CURL_SOCKET_BAD;
        s->fds = fds;
        s->fds_cap = cap;
    }
    fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
    if (fd != CURL_SOCKET_BAD)
        s->fds[s->nfds++] = fd;
    return fd;
}

/* CURLOPT_CLOSESOCKETFUNCTION: forgets and closes a socket opened above. */
static int email_close_socket_cb(void *clientp, curl_socket_t fd)
{
    crier_email_sender *s = clientp;
    size_t i;

    for (i = 0; i < s->nfds; i++) {
        if (s->fds[i] == fd) {
            s->fds[i] = s->fds[--s->nfds];
            break;
        }
    }
    return close(fd);
}

/* True for the 5xx replies about the relay's authentication or TLS policy
 * (RFC 4954: 530 authentication/STARTTLS required, 534 mechanism too weak, 535
 * credentials invalid, 538 encryption required): configuration, not message. */
static int email_is_auth_reply(long status)
{
    return status == 530 || status == 534 || status == 535 || status == 538;
}

/* Completes one transaction: builds and classifies the result, calls done,
 * frees the transfer (the connection stays cached in the multi handle). */
static void email_finish(crier_email_sender *s, email_transfer *t, CURLcode code)
{
    crier_email_result r;
    long status = 0;

    email_active_unlink(s, t);
    curl_multi_remove_handle(s->multi, t->easy);
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);

    memset(&r, 0, sizeof r);
    r.delivery_id = t->delivery_id;
    r.smtp_code = status;
    r.duration_ms = email_now_ms() - t->start_ms;
    if (code != CURLE_OK) {
        r.error = t->errbuf[0] ? t->errbuf : curl_easy_strerror(code);
        r.timed_out = code == CURLE_OPERATION_TIMEDOUT;
        r.permanent = !r.timed_out && code != CURLE_LOGIN_DENIED && status >= 500 && status < 600 &&
                      !email_is_auth_reply(status);
        crier_debug("email", "delivery %" PRId64 ": %s (smtp %ld, %s)", t->delivery_id, r.error,
                    status, r.permanent ? "permanent" : "transient");
    }
    s->inflight--;
    s->done(s->ud, &r);
    email_transfer_free(t);
}

static void email_sender_destroy(crier_email_sender *s);

/* Reads curl's completion messages and dispatches them. Runs only from the
 * loop's watcher callbacks, so done is never called from inside send. */
static void email_drain(crier_email_sender *s)
{
    CURLMsg *m;
    int left;

    s->dispatching++;
    while (!s->closing && (m = curl_multi_info_read(s->multi, &left)) != NULL) {
        email_transfer *t = NULL;
        CURLcode code;

        if (m->msg != CURLMSG_DONE)
            continue;
        code = m->data.result;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        assert(t != NULL);
        email_finish(s, t, code);
    }
    s->dispatching--;
    if (s->closing && s->dispatching == 0)
        email_sender_destroy(s);
}

/* True for an smtp:// or smtps:// url without controls or spaces. */
static int email_url_ok(const char *url)
{
    const unsigned char *p;

    if (!url || (strncasecmp(url, "smtp://", 7) != 0 && strncasecmp(url, "smtps://", 8) != 0))
        return 0;
    for (p = (const unsigned char *)url; *p; p++)
        if (*p <= 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

/* Sets every option of one transaction on t's fresh easy handle. */
static int email_transfer_setup(crier_email_sender *s, email_transfer *t,
                                const crier_email_request *req)
{
    CURL *e = t->easy;
    char envelope[EMAIL_MAX_ADDRESS_LEN + 3];
    struct curl_slist *l;
    CURLcode rc;

#define EMAIL_SETOPT(opt, val)                                                                     \
    do {                                                                                           \
        rc = curl_easy_setopt(e, opt, val);                                                        \
        if (rc != CURLE_OK)                                                                        \
            goto err;                                                                              \
    } while (0)

    /* Addresses were validated by crier_email_format (≤ 254 bytes). */
    snprintf(envelope, sizeof envelope, "<%s>", req->message.to_address);
    l = curl_slist_append(NULL, envelope);
    if (!l) {
        crier_warn("email", "out of memory building the recipient list");
        return -1;
    }
    t->rcpt = l;
    snprintf(envelope, sizeof envelope, "<%s>", req->message.from_address);

    EMAIL_SETOPT(CURLOPT_PRIVATE, t);
    EMAIL_SETOPT(CURLOPT_NOSIGNAL, 1L);
    EMAIL_SETOPT(CURLOPT_URL, req->url);
    EMAIL_SETOPT(CURLOPT_PROTOCOLS_STR, "smtp,smtps");
    EMAIL_SETOPT(CURLOPT_CONNECTTIMEOUT_MS, s->opts.connect_timeout_ms);
    EMAIL_SETOPT(CURLOPT_TIMEOUT_MS, s->opts.total_timeout_ms);
    EMAIL_SETOPT(CURLOPT_USE_SSL,
                 s->opts.require_tls ? (long)CURLUSESSL_ALL : (long)CURLUSESSL_TRY);
    if (req->username) {
        EMAIL_SETOPT(CURLOPT_USERNAME, req->username);
        EMAIL_SETOPT(CURLOPT_PASSWORD, req->password ? req->password : "");
    }
    EMAIL_SETOPT(CURLOPT_MAIL_FROM, envelope);
    EMAIL_SETOPT(CURLOPT_MAIL_RCPT, t->rcpt);
    EMAIL_SETOPT(CURLOPT_UPLOAD, 1L);
    EMAIL_SETOPT(CURLOPT_READFUNCTION, email_read_cb);
    EMAIL_SETOPT(CURLOPT_READDATA, t);
    EMAIL_SETOPT(CURLOPT_INFILESIZE_LARGE, (curl_off_t)t->msg_len);
    EMAIL_SETOPT(CURLOPT_ERRORBUFFER, t->errbuf);
    EMAIL_SETOPT(CURLOPT_TCP_NODELAY, 1L);
    EMAIL_SETOPT(CURLOPT_OPENSOCKETFUNCTION, email_open_socket_cb);
    EMAIL_SETOPT(CURLOPT_OPENSOCKETDATA, s);
    EMAIL_SETOPT(CURLOPT_CLOSESOCKETFUNCTION, email_close_socket_cb);
    EMAIL_SETOPT(CURLOPT_CLOSESOCKETDATA, s);
    return 0;
err:
    crier_warn("email", "delivery %" PRId64 ": curl_easy_setopt failed: %s", req->delivery_id,
               curl_easy_strerror(rc));
    return -1;
#undef EMAIL_SETOPT
}

/* ---- public API ---------------------------------------------------------- */

crier_email_sender *crier_email_sender_new(struct ev_loop *loop, const crier_email_options *opts,
                                           crier_email_done_fn done, void *ud)
{
    crier_email_sender *s;

    if (!loop || !done) {
        crier_warn("email", "sender needs a loop and a done callback");
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        goto err;
    s->loop = loop;
    s->done = done;
    s->ud = ud;
    if (opts)
        s->opts = *opts;
    /* Zero (or negative) fields mean "default", so a zeroed struct works. */
    if (s->opts.connect_timeout_ms <= 0)
        s->opts.connect_timeout_ms = EMAIL_DEFAULT_CONNECT_TIMEOUT_MS;
    if (s->opts.total_timeout_ms <= 0)
        s->opts.total_timeout_ms = EMAIL_DEFAULT_TOTAL_TIMEOUT_MS;
    if (s->opts.max_inflight <= 0)
        s->opts.max_inflight = EMAIL_DEFAULT_MAX_INFLIGHT;
    s->domain =
        strdup(s->opts.message_id_domain && *s->opts.message_id_domain ? s->opts.message_id_domain
                                                                       : EMAIL_DEFAULT_DOMAIN);
    if (!s->domain)
        goto err;
    if (!email_is_token(s->domain, EMAIL_MAX_DOMAIN_LEN, ".-")) {
        crier_warn("email", "message_id_domain must be 1..%d bytes of [A-Za-z0-9.-]",
                   EMAIL_MAX_DOMAIN_LEN);
        goto err;
    }
    s->opts.message_id_domain = s->domain;

    ev_timer_init(&s->timer, email_timer_cb, 0.0, 0.0);
    s->timer.data = s;
    s->multi = curl_multi_init();
    if (!s->multi)
        goto err;
    if (curl_multi_setopt(s->multi, CURLMOPT_SOCKETFUNCTION, email_socket_cb) != CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_SOCKETDATA, s) != CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_TIMERFUNCTION, email_curl_timer_cb) != CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_TIMERDATA, s) != CURLM_OK ||
        curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, (long)s->opts.max_inflight) != CURLM_OK)
        goto err;
    return s;
err:
    crier_warn("email", "could not create the email sender");
    if (s) {
        if (s->multi)
            curl_multi_cleanup(s->multi);
        free(s->domain);
    }
    free(s);
    return NULL;
}

int crier_email_send(crier_email_sender *s, const crier_email_request *req)
{
    email_transfer *t = NULL;
    char err[256];
    CURLMcode mc;

    if (!s || s->closing || !req)
        return -1;
    if (s->inflight >= s->opts.max_inflight)
        return -1;
    if (!email_url_ok(req->url)) {
        crier_warn("email", "refused delivery %" PRId64 ": url is not smtp:// or smtps://",
                   req->delivery_id);
        return -1;
    }
    t = calloc(1, sizeof *t);
    if (!t) {
        crier_warn("email", "out of memory for a transfer");
        return -1;
    }
    t->sender = s;
    t->delivery_id = req->delivery_id;
    if (crier_email_format(&req->message, &s->opts, &t->msg, &t->msg_len, err, sizeof err) != 0) {
        crier_warn("email", "refused delivery %" PRId64 ": %s", req->delivery_id, err);
        goto err;
    }
    t->easy = curl_easy_init();
    if (!t->easy) {
        crier_warn("email", "delivery %" PRId64 ": curl_easy_init failed", req->delivery_id);
        goto err;
    }
    if (email_transfer_setup(s, t, req) != 0)
        goto err;
    t->start_ms = email_now_ms();
    mc = curl_multi_add_handle(s->multi, t->easy);
    if (mc != CURLM_OK) {
        crier_warn("email", "delivery %" PRId64 ": curl_multi_add_handle: %s", req->delivery_id,
                   curl_multi_strerror(mc));
        goto err;
    }
    t->next = s->active;
    if (s->active)
        s->active->prev = t;
    s->active = t;
    s->inflight++;
    return 0;
err:
    email_transfer_free(t);
    return -1;
}

int crier_email_inflight(const crier_email_sender *s)
{
    return s ? s->inflight : 0;
}

static void email_sender_destroy(crier_email_sender *s)
{
    email_transfer *t, *next;
    email_socket *es, *enext;
    size_t i;

    ev_timer_stop(s->loop, &s->timer);
    for (t = s->active; t; t = next) {
        next = t->next;
        curl_multi_remove_handle(s->multi, t->easy);
        email_transfer_free(t);
    }
    s->active = NULL;
    /* Cached connections get a QUIT from curl_multi_cleanup, which waits for
     * the reply; shut the sockets down first so that fails at once. */
    for (i = 0; i < s->nfds; i++)
        shutdown(s->fds[i], SHUT_RDWR);
    /* Closes cached connections; may still call the socket callbacks. */
    curl_multi_cleanup(s->multi);
    for (es = s->sockets; es; es = enext) {
        enext = es->next;
        ev_io_stop(s->loop, &es->io);
        free(es);
    }
    ev_timer_stop(s->loop, &s->timer);
    free(s->fds);
    free(s->domain);
    free(s);
}

void crier_email_sender_free(crier_email_sender *s)
{
    if (!s)
        return;
    s->closing = 1;
    /* Called from inside a done callback: finish once dispatch unwinds. */
    if (s->dispatching > 0)
        return;
    email_sender_destroy(s);
}
