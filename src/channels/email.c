/* email.c — the email channel's sender: formats one RFC 5322 / MIME message per
 * notification and submits it over SMTP through libcurl's multi interface,
 * driven by a libev loop through curl_ev.c. The multi handle's connection cache lets
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
 * if the relay hangs. curl_ev.c opens the sockets itself (open/close socket
 * callbacks) and shuts them down before cleanup, so freeing never waits on a
 * server. */
#include "email.h"

#include "base64.h"
#include "clock.h"
#include "curl_ev.h"
#include "log.h"

#include <curl/curl.h>

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define EMAIL_DEFAULT_CONNECT_TIMEOUT_MS 10000L
#define EMAIL_DEFAULT_TOTAL_TIMEOUT_MS 60000L
#define EMAIL_DEFAULT_MAX_INFLIGHT 64
#define EMAIL_DEFAULT_MAX_QUEUED 512 /* as the delivery worker's default (delivery.c) */
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
        crier_set_error(err, err_len, "%s address is missing", what);
        return -1;
    }
    len = strlen(a);
    if (len > EMAIL_MAX_ADDRESS_LEN) {
        crier_set_error(err, err_len, "%s address is longer than %d bytes", what,
                      EMAIL_MAX_ADDRESS_LEN);
        return -1;
    }
    for (p = (const unsigned char *)a; *p; p++) {
        if (*p <= 0x20 || *p >= 0x7f || strchr("<>\"(),;:\\[]", *p)) {
            crier_set_error(err, err_len,
                          "%s address has a forbidden character (control, space, non-ASCII "
                          "or one of <>\"(),;:\\[])",
                          what);
            return -1;
        }
    }
    at = strchr(a, '@');
    if (!at || at == a || at[1] == '\0' || strchr(at + 1, '@')) {
        crier_set_error(err, err_len,
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
        {
            char word[CRIER_BASE64_ENCODED_SIZE(EMAIL_WORD_BYTES)];
            email_buf_add(b, word, crier_base64_encode(p, n, word));
        }
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
        crier_set_error(err, err_len, "missing message or output");
        return -1;
    }
    if (!email_is_token(m->message_id, EMAIL_MAX_ID_LEN, "._+=-")) {
        crier_set_error(err, err_len, "message_id must be 1..%d bytes of [A-Za-z0-9._+=-]",
                      EMAIL_MAX_ID_LEN);
        return -1;
    }
    if (!email_is_token(domain, EMAIL_MAX_DOMAIN_LEN, ".-")) {
        crier_set_error(err, err_len, "message_id_domain must be 1..%d bytes of [A-Za-z0-9.-]",
                      EMAIL_MAX_DOMAIN_LEN);
        return -1;
    }
    if (email_check_address(m->from_address, "from", err, err_len) != 0 ||
        email_check_address(m->to_address, "to", err, err_len) != 0)
        return -1;
    if (!m->text && !m->html) {
        crier_set_error(err, err_len, "message has neither a text nor an html part");
        return -1;
    }

    when = m->date ? (time_t)m->date : time(NULL);
    if (!gmtime_r(&when, &tm)) {
        crier_set_error(err, err_len, "date out of range");
        return -1;
    }
    subject = email_clean_text(m->subject);
    if (!subject)
        goto out;

    if (email_put_mailbox(&b, "From", m->from_name, m->from_address) != 0 ||
        email_put_mailbox(&b, "To", m->to_name, m->to_address) != 0)
        goto out;
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
        goto out;
    *out = b.data;
    *out_len = b.len;
    b.data = NULL;
    rc = 0;
out:
    if (rc < 0) /* only allocations fail after the checks above */
        crier_set_error(err, err_len, "out of memory");
    free(subject);
    free(b.data);
    return rc;
}

/* ---- the sender ---------------------------------------------------------- */

typedef struct email_transfer email_transfer;

/* One SMTP transaction in flight. */
struct email_transfer {
    crier_email_sender *sender;
    email_transfer *prev, *next;
    CURL *easy;
    struct curl_slist *rcpt;
    char *msg;
    size_t msg_len, msg_off;
    int64_t token;       /* handed back in the result */
    int64_t delivery_id; /* for the log */
    double start_ms;
    char errbuf[CURL_ERROR_SIZE];
};

struct crier_email_sender {
    crier_curl_ev *curl;
    crier_email_options opts;
    char *domain; /* owned copy of opts.message_id_domain */
    crier_email_done_fn done;
    void *ud;
    int inflight;
    email_transfer *active; /* doubly linked */
};

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

/* True for the 5xx replies about the relay's authentication or TLS policy
 * (RFC 4954: 530 authentication/STARTTLS required, 534 mechanism too weak, 535
 * credentials invalid, 538 encryption required): configuration, not message. */
static int email_is_auth_reply(long status)
{
    return status == 530 || status == 534 || status == 535 || status == 538;
}

/* crier_curl_ev_done_fn: completes one transaction — builds and classifies
 * the result, calls done, frees the transfer (the connection stays cached in the multi handle). */
static void email_curl_done(void *ud, CURL *easy, CURLcode code)
{
    crier_email_sender *s = ud;
    email_transfer *t = NULL;
    crier_email_result r;
    long status = 0;

    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
    assert(t != NULL);
    email_active_unlink(s, t);
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);

    memset(&r, 0, sizeof r);
    r.token = t->token;
    r.smtp_code = status;
    r.duration_ms = crier_clock_ms() - t->start_ms;
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
            goto fail;                                                                              \
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
    if ((rc = crier_curl_ev_set_trust(e, s->opts.ca_file)) != CURLE_OK)
        goto fail;
    return 0;
fail:
    crier_warn("email", "delivery %" PRId64 ": curl_easy_setopt failed: %s", req->delivery_id,
               curl_easy_strerror(rc));
    return -1;
#undef EMAIL_SETOPT
}

static void email_sender_destroy(void *ud);

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
        goto fail;
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
    if (s->opts.max_queued <= 0)
        s->opts.max_queued = EMAIL_DEFAULT_MAX_QUEUED;
    if (s->opts.max_queued < s->opts.max_inflight)
        s->opts.max_queued = s->opts.max_inflight;
    s->domain =
        strdup(s->opts.message_id_domain && *s->opts.message_id_domain ? s->opts.message_id_domain
                                                                       : EMAIL_DEFAULT_DOMAIN);
    if (!s->domain)
        goto fail;
    if (!email_is_token(s->domain, EMAIL_MAX_DOMAIN_LEN, ".-")) {
        crier_warn("email", "message_id_domain must be 1..%d bytes of [A-Za-z0-9.-]",
                   EMAIL_MAX_DOMAIN_LEN);
        goto fail;
    }
    s->opts.message_id_domain = s->domain;

    s->curl = crier_curl_ev_new(loop, (long)s->opts.max_inflight, "email", email_curl_done,
                                email_sender_destroy, s);
    if (!s->curl)
        goto fail;
    if (crier_curl_ev_limit_connections(s->curl, (long)s->opts.max_inflight) != CURLM_OK)
        crier_warn("email", "libcurl cannot limit the SMTP connections to %d: messages past it open "
                            "connections of their own", s->opts.max_inflight);
    return s;
fail:
    crier_warn("email", "could not create the email sender");
    if (s)
        free(s->domain);
    free(s);
    return NULL;
}

int crier_email_send(crier_email_sender *s, const crier_email_request *req)
{
    email_transfer *t = NULL;
    char err[256];

    if (!s || crier_curl_ev_closing(s->curl) || !req)
        return -1;
    if (s->inflight >= s->opts.max_queued)
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
    t->token = req->token;
    t->delivery_id = req->delivery_id;
    if (crier_email_format(&req->message, &s->opts, &t->msg, &t->msg_len, err, sizeof err) != 0) {
        crier_warn("email", "refused delivery %" PRId64 ": %s", req->delivery_id, err);
        goto fail;
    }
    t->easy = curl_easy_init();
    if (!t->easy) {
        crier_warn("email", "delivery %" PRId64 ": curl_easy_init failed", req->delivery_id);
        goto fail;
    }
    if (email_transfer_setup(s, t, req) != 0)
        goto fail;
    t->start_ms = crier_clock_ms();
    if (crier_curl_ev_add(s->curl, t->easy) != 0) {
        crier_warn("email", "delivery %" PRId64 ": libcurl refused the transfer", req->delivery_id);
        goto fail;
    }
    t->next = s->active;
    if (s->active)
        s->active->prev = t;
    s->active = t;
    s->inflight++;
    return 0;
fail:
    email_transfer_free(t);
    return -1;
}

int crier_email_inflight(const crier_email_sender *s)
{
    return s ? s->inflight : 0;
}

/* crier_curl_ev_destroy_fn: frees the transactions in flight and the sender
 * (the driver shuts the connections down afterwards, so no QUIT is waited for). */
static void email_sender_destroy(void *ud)
{
    crier_email_sender *s = ud;
    email_transfer *t, *next;

    for (t = s->active; t; t = next) {
        next = t->next;
        crier_curl_ev_remove(s->curl, t->easy);
        email_transfer_free(t);
    }
    free(s->domain);
    free(s);
}

void crier_email_sender_free(crier_email_sender *s)
{
    if (s)
        crier_curl_ev_close(s->curl);
}
