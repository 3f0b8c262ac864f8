/* test_email.c — tests the email channel: crier_email_format on its own
 * (headers, RFC 2047 subjects, quoted-printable parts, determinism, header
 * injection), and the sender on a libev loop against a real SMTP server,
 * tests/support/smtp_sink.py (aiosmtpd): concurrent submissions read back
 * byte for byte, AUTH, 451/550 replies, a server that is down and then up, a
 * server that never greets (timeout), limits and freeing from a callback. */
#define _GNU_SOURCE /* strcasestr */

#include "check.h"
#include "child_server.h"
#include "base64.h"
#include "email.h"
#include "log.h"

#include <curl/curl.h>
#include <ev.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FIXED_DATE 1772712000 /* Thu, 05 Mar 2026 12:00:00 +0000 */
/* "Rechnung für März 💶" and its one encoded word. */
#define MARCH_SUBJECT "Rechnung f\xc3\xbcr M\xc3\xa4rz \xf0\x9f\x92\xb6"
#define MARCH_SUBJECT_WORD "=?UTF-8?B?UmVjaG51bmcgZsO8ciBNw6RyeiDwn5K2?="
#define EVIL_SUBJECT "Rechnung\r\nBcc: evil@x"
#define DOT_TEXT "Hallo J\xc3\xbcrgen,\n.\n.hidden line\nsum = 12,50 \xe2\x82\xac \nEnde"
#define HTML "<p>Hallo J\xc3\xbcrgen, <b>12,50&nbsp;&euro;</b></p>\n"

/* ---- small decoders used to read messages back --------------------------- */

/* Copies the unfolded value of header name (e.g. "Subject") from msg into out,
 * decoding =?UTF-8?B?…?= words (whitespace between words dropped). Returns 0,
 * or -1 if the header is missing. Also checks each encoded word is ≤ 75. */
static int header_value(const char *msg, const char *name, char *out, size_t out_len)
{
    char pat[64];
    const char *p, *end;
    size_t o = 0;

    snprintf(pat, sizeof pat, "%s: ", name);
    if (strncmp(msg, pat, strlen(pat)) == 0) {
        p = msg + strlen(pat);
    } else {
        snprintf(pat, sizeof pat, "\r\n%s: ", name);
        p = strstr(msg, pat);
        if (!p)
            return -1;
        p += strlen(pat);
    }
    /* The value ends at a CRLF not followed by folding whitespace. */
    for (end = p; *end; end++)
        if (end[0] == '\r' && end[1] == '\n' && end[2] != ' ' && end[2] != '\t')
            break;
    while (p < end && o + 1 < out_len) {
        if (strncmp(p, "=?UTF-8?B?", 10) == 0) {
            const char *q = strstr(p + 10, "?=");
            char tmp[128];
            size_t n;

            if (!q || q > end)
                return -1;
            CHECK(q + 2 - p <= 75);
            long dn = crier_base64_decode(p + 10, (size_t)(q - (p + 10)), (unsigned char *)tmp);
            if (dn < 0)
                return -1;
            n = (size_t)dn;
            if (o + n + 1 > out_len)
                return -1;
            memcpy(out + o, tmp, n);
            o += n;
            p = q + 2;
            /* Whitespace (folds) between two encoded words is not content. */
            while (p < end && (*p == '\r' || *p == '\n' || *p == ' ' || *p == '\t')) {
                const char *r = p;
                while (r < end && (*r == '\r' || *r == '\n' || *r == ' ' || *r == '\t'))
                    r++;
                if (strncmp(r, "=?UTF-8?B?", 10) == 0 || r == end)
                    p = r;
                else
                    break;
            }
        } else if (p[0] == '\r' && p[1] == '\n') {
            p += 2; /* unfold */
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    return 0;
}

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Finds the part of msg with Content-Type type (quoted-printable), decodes its
 * body into a malloc'd string. NULL if absent. */
static char *part_text(const char *msg, const char *type)
{
    char pat[160];
    const char *p, *end;
    char *out, *o;

    snprintf(
        pat, sizeof pat,
        "Content-Type: %s; charset=UTF-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n",
        type);
    p = strstr(msg, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    end = strstr(p, "\r\n--=_crier_");
    if (!end)
        end = p + strlen(p);
    out = malloc((size_t)(end - p) + 1);
    o = out;
    while (p < end) {
        if (p[0] == '=' && p[1] == '\r' && p[2] == '\n') {
            p += 3;
        } else if (p[0] == '=' && hex_value(p[1]) >= 0 && hex_value(p[2]) >= 0) {
            *o++ = (char)(hex_value(p[1]) * 16 + hex_value(p[2]));
            p += 3;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

/* s with every line break made CRLF, as the message carries it (malloc'd). */
static char *crlf(const char *s)
{
    char *out = malloc(2 * strlen(s) + 1), *o = out;

    for (; *s; s++) {
        if (*s == '\r' && s[1] == '\n')
            continue;
        if (*s == '\n' || *s == '\r') {
            *o++ = '\r';
            *o++ = '\n';
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
    return out;
}

/* Checks the wire rules: only ASCII, CRLF line endings and no bare CR or LF,
 * header lines < 998 bytes and body lines ≤ 76 bytes. */
static void check_wire_format(const char *msg, size_t len)
{
    const char *body = strstr(msg, "\r\n\r\n");
    size_t i, line = 0, longest_body = 0, longest = 0;

    CHECK(body != NULL);
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)msg[i];

        CHECK(c < 0x80 && c != 0);
        if (c == '\r') {
            CHECK(i + 1 < len && msg[i + 1] == '\n');
            if (line > longest)
                longest = line;
            if (body && msg + i > body && line > longest_body)
                longest_body = line;
            line = 0;
            i++;
            continue;
        }
        CHECK(c != '\n');
        line++;
    }
    CHECK(line == 0); /* ends with CRLF */
    CHECK(longest < 998);
    CHECK(longest_body <= 76);
}

/* The header section of msg (up to the first empty line), malloc'd. */
static char *headers_of(const char *msg)
{
    const char *end = strstr(msg, "\r\n\r\n");
    size_t n = end ? (size_t)(end - msg) + 2 : strlen(msg);
    char *h = malloc(n + 1);

    memcpy(h, msg, n);
    h[n] = '\0';
    return h;
}

/* True when some header line of msg starts with name (e.g. "Bcc:"). */
static int has_header_line(const char *msg, const char *name)
{
    char *h = headers_of(msg);
    char pat[64];
    int found;

    snprintf(pat, sizeof pat, "\n%s", name);
    found = strncasecmp(h, name, strlen(name)) == 0 || strcasestr(h, pat) != NULL;
    free(h);
    return found;
}

static crier_email_message sample_message(const char *id, const char *to)
{
    crier_email_message m;

    memset(&m, 0, sizeof m);
    m.message_id = id;
    m.from_address = "billing@acme.example";
    m.from_name = "Acme Billing";
    m.to_address = to;
    m.to_name = "J\xc3\xbcrgen Gro\xc3\x9f";
    m.subject = MARCH_SUBJECT;
    m.text = DOT_TEXT;
    m.html = HTML;
    m.date = FIXED_DATE;
    return m;
}

static char *format_ok(const crier_email_message *m, const crier_email_options *o, size_t *len)
{
    char err[256] = "";
    char *out = NULL;
    size_t n = 0;

    if (crier_email_format(m, o, &out, &n, err, sizeof err) != 0) {
        fprintf(stderr, "crier_email_format: %s\n", err);
        CHECK(0);
        return NULL;
    }
    CHECK(strlen(out) == n);
    check_wire_format(out, n);
    if (len)
        *len = n;
    return out;
}

static int format_refused(const crier_email_message *m, const crier_email_options *o)
{
    char err[256] = "";
    char *out = NULL;
    size_t n = 0;
    int rc = crier_email_format(m, o, &out, &n, err, sizeof err);

    if (rc == 0)
        free(out);
    return rc == -1 && out == NULL && err[0] != '\0';
}

/* ---- crier_email_format -------------------------------------------------- */

static void test_format(void)
{
    crier_email_message m = sample_message("msg_45a9f0c2", "juergen@example.org");
    crier_email_options o;
    char value[4096], *msg, *again, *text, *html, *want;
    const char *b1, *b2;
    size_t len, len2;

    msg = format_ok(&m, NULL, &len);
    if (!msg)
        return;
    CHECK(strncmp(msg, "From: \"Acme Billing\" <billing@acme.example>\r\n", 45) == 0);
    CHECK(strstr(msg, "\r\nTo: =?UTF-8?B?") != NULL);
    CHECK(strstr(msg, "?= <juergen@example.org>\r\n") != NULL);
    CHECK(header_value(msg, "To", value, sizeof value) == 0);
    CHECK_STR(value, "J\xc3\xbcrgen Gro\xc3\x9f <juergen@example.org>");
    CHECK(strstr(msg, "\r\nSubject: " MARCH_SUBJECT_WORD "\r\n") != NULL);
    CHECK(header_value(msg, "Subject", value, sizeof value) == 0);
    CHECK_STR(value, MARCH_SUBJECT);
    CHECK(strstr(msg, "\r\nDate: Thu, 05 Mar 2026 12:00:00 +0000\r\n") != NULL);
    CHECK(strstr(msg, "\r\nMessage-ID: <msg_45a9f0c2@crier.invalid>\r\n") != NULL);
    CHECK(strstr(msg, "\r\nIdempotency-Key: msg_45a9f0c2\r\n") != NULL);
    CHECK(strstr(msg, "\r\nX-Crier-Notification: msg_45a9f0c2\r\n") != NULL);
    CHECK(strstr(msg, "\r\nMIME-Version: 1.0\r\n") != NULL);
    b1 = strstr(msg, "Content-Type: multipart/alternative; boundary=\"=_crier_");
    CHECK(b1 != NULL);

    /* Both parts, decoded back exactly (line breaks as CRLF). */
    text = part_text(msg, "text/plain");
    html = part_text(msg, "text/html");
    want = crlf(DOT_TEXT);
    CHECK_STR(text, want);
    free(want);
    want = crlf(HTML);
    CHECK_STR(html, want);
    free(want);
    free(text);
    free(html);
    /* No line of the encoded body starts with a '.' (encoded as =2E). */
    CHECK(strstr(msg, "\r\n.") == NULL);

    /* Deterministic: the same bytes again; another date changes only Date. */
    again = format_ok(&m, NULL, &len2);
    CHECK(again && len2 == len && memcmp(msg, again, len) == 0);
    free(again);
    m.date = FIXED_DATE + 86400;
    again = format_ok(&m, NULL, &len2);
    CHECK(again && len2 == len);
    if (again) {
        CHECK(strstr(again, "\r\nDate: Fri, 06 Mar 2026 12:00:00 +0000\r\n") != NULL);
        b2 = strstr(again, "boundary=\"");
        CHECK(b2 && strncmp(b2, strstr(msg, "boundary=\""), 36) == 0);
        free(again);
    }
    /* Another id, another boundary and Message-ID; a configured domain. */
    m.message_id = "msg_0000ffff";
    memset(&o, 0, sizeof o);
    o.message_id_domain = "mail.acme.example";
    again = format_ok(&m, &o, NULL);
    if (again) {
        CHECK(strstr(again, "\r\nMessage-ID: <msg_0000ffff@mail.acme.example>\r\n") != NULL);
        b2 = strstr(again, "boundary=\"");
        CHECK(b2 && strncmp(b2, strstr(msg, "boundary=\""), 36) != 0);
        free(again);
    }
    free(msg);

    /* Single parts. */
    m = sample_message("msg_single", "a@example.org");
    m.html = NULL;
    msg = format_ok(&m, NULL, NULL);
    if (msg) {
        CHECK(strstr(msg, "multipart") == NULL);
        CHECK(strstr(msg, "\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=UTF-8\r\n"
                          "Content-Transfer-Encoding: quoted-printable\r\n\r\n") != NULL);
        text = part_text(msg, "text/plain");
        want = crlf(DOT_TEXT "\n");
        CHECK_STR(text, want);
        free(want);
        free(text);
        free(msg);
    }
    m.text = NULL;
    m.html = HTML;
    msg = format_ok(&m, NULL, NULL);
    if (msg) {
        CHECK(strstr(msg, "multipart") == NULL);
        CHECK(strstr(msg, "Content-Type: text/html; charset=UTF-8\r\n") != NULL);
        free(msg);
    }
    m.html = NULL;
    CHECK(format_refused(&m, NULL));
}

static void test_format_long(void)
{
    crier_email_message m = sample_message("msg_long", "a@example.org");
    char subject[1024], value[4096], *longline, *msg, *text, *want;
    size_t i;

    /* 120 two- and three-byte characters: many encoded words, none split. */
    subject[0] = '\0';
    for (i = 0; i < 60; i++)
        strcat(subject, "\xc3\xa4\xe2\x82\xac"); /* "ä€" */
    strcat(subject, " end");
    m.subject = subject;
    longline = malloc(5002);
    memset(longline, 'x', 5000);
    longline[4990] = ' ';
    longline[5000] = '\0';
    m.text = longline;
    msg = format_ok(&m, NULL, NULL);
    if (msg) {
        CHECK(header_value(msg, "Subject", value, sizeof value) == 0);
        CHECK_STR(value, subject);
        text = part_text(msg, "text/plain");
        want = crlf(longline);
        CHECK_STR(text, want);
        free(want);
        free(text);
        free(msg);
    }
    /* A long ASCII subject is encoded (and folded) instead of one long line. */
    memset(subject, 'S', 1000);
    subject[1000] = '\0';
    msg = format_ok(&m, NULL, NULL);
    if (msg) {
        CHECK(header_value(msg, "Subject", value, sizeof value) == 0);
        CHECK_STR(value, subject);
        free(msg);
    }
    free(longline);
}

static void test_format_injection(void)
{
    crier_email_message m = sample_message("msg_evil", "a@example.org");
    crier_email_options o;
    char value[1024], *msg;
    static const char *const bad_addresses[] = {
        "a@example.org\r\nBcc: evil@x",
        "a@example.org\nBcc: evil@x",
        "Eve <eve@example.org>",
        "eve@example.org>",
        "a@b@example.org",
        "nobody",
        "@example.org",
        "a@",
        "a b@example.org",
        "a@example.org,evil@x",
        "\xc3\xa4@example.org",
        "",
    };
    size_t i;

    /* A payload-derived subject cannot start a header of its own. */
    m.subject = EVIL_SUBJECT;
    msg = format_ok(&m, NULL, NULL);
    if (msg) {
        CHECK(!has_header_line(msg, "Bcc:"));
        CHECK(header_value(msg, "Subject", value, sizeof value) == 0);
        CHECK_STR(value, "Rechnung  Bcc: evil@x");
        free(msg);
    }
    /* Nor can a blank line in it end the headers early. */
    m.subject = "x\r\n\r\n--=_crier_0\r\nContent-Type: text/html";
    msg = format_ok(&m, NULL, NULL);
    if (msg) {
        char *h = headers_of(msg);
        CHECK(strstr(h, "\r\nMIME-Version: 1.0\r\n") != NULL);
        CHECK(!has_header_line(msg, "Content-Type: text/html"));
        CHECK(strstr(h, "\r\n\r\n") == NULL);
        free(h);
        free(msg);
    }
    /* Display names are cleaned the same way, and quoted. */
    m.subject = "ok";
    m.from_name = "Eve\r\nBcc: evil@x";
    m.to_name = "Acme \"Billing\" \\ Dept";
    msg = format_ok(&m, NULL, NULL);
    if (msg) {
        CHECK(!has_header_line(msg, "Bcc:"));
        CHECK(strncmp(msg, "From: \"Eve  Bcc: evil@x\" <billing@acme.example>\r\n", 49) == 0);
        CHECK(strstr(msg, "\r\nTo: \"Acme \\\"Billing\\\" \\\\ Dept\" <a@example.org>\r\n") !=
              NULL);
        free(msg);
    }
    /* Invalid UTF-8 becomes U+FFFD rather than broken encoded words. */
    m = sample_message("msg_evil", "a@example.org");
    m.subject = "caf\xe9 \xff";
    msg = format_ok(&m, NULL, NULL);
    if (msg) {
        CHECK(header_value(msg, "Subject", value, sizeof value) == 0);
        CHECK_STR(value, "caf\xef\xbf\xbd \xef\xbf\xbd");
        free(msg);
    }

    crier_log_set_level(CRIER_LOG_ERROR);
    for (i = 0; i < sizeof bad_addresses / sizeof bad_addresses[0]; i++) {
        m = sample_message("msg_evil", bad_addresses[i]);
        if (!format_refused(&m, NULL)) {
            fprintf(stderr, "to address %zu was not refused\n", i);
            CHECK(0);
        }
        m = sample_message("msg_evil", "a@example.org");
        m.from_address = bad_addresses[i];
        CHECK(format_refused(&m, NULL));
    }
    m = sample_message("msg_evil", "a@example.org");
    m.from_address = NULL;
    CHECK(format_refused(&m, NULL));
    m = sample_message("msg_1>\r\nBcc: evil@x", "a@example.org");
    CHECK(format_refused(&m, NULL));
    m = sample_message("", "a@example.org");
    CHECK(format_refused(&m, NULL));
    m = sample_message(NULL, "a@example.org");
    CHECK(format_refused(&m, NULL));
    m = sample_message("msg_ok", "a@example.org");
    memset(&o, 0, sizeof o);
    o.message_id_domain = "acme.example>\r\nBcc: evil@x";
    CHECK(format_refused(&m, &o));
    crier_log_set_level(CRIER_LOG_INFO);
    crier_log_init_from_env();
}

/* ---- the SMTP sink ------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int port;
    char log_path[512];
} sink;

#define MAX_SINKS 8
static sink *sinks[MAX_SINKS]; /* every started sink, stopped at exit */

/* Starts smtp_sink.py (port 0 = any) with extra arguments (NULL-terminated). */
static int sink_start(sink *k, const char *dir, const char *name, int port, ...)
{
    const char *src = getenv("CRIER_SOURCE_DIR");
    char script[1024], port_file[600], port_arg[16];
    const char *argv[24];
    int argc = 0, i;
    va_list ap;
    const char *a;

    memset(k, 0, sizeof k[0]);
    if (!src || !*src)
        src = ".";
    snprintf(script, sizeof script, "%s/tests/support/smtp_sink.py", src);
    snprintf(port_file, sizeof port_file, "%s/%s.port", dir, name);
    snprintf(k->log_path, sizeof k->log_path, "%s/%s.log", dir, name);
    snprintf(port_arg, sizeof port_arg, "%d", port);
    unlink(port_file);
    argv[argc++] = "/usr/bin/python3";
    argv[argc++] = script;
    argv[argc++] = "--port-file";
    argv[argc++] = port_file;
    argv[argc++] = "--log";
    argv[argc++] = k->log_path;
    argv[argc++] = "--port";
    argv[argc++] = port_arg;
    va_start(ap, port);
    while ((a = va_arg(ap, const char *)) != NULL && argc < 22)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    k->pid = child_server_start(argv, port_file, &k->port);
    if (k->pid <= 0) {
        k->pid = 0;
        return -1;
    }
    for (i = 0; i < MAX_SINKS; i++) {
        if (!sinks[i]) {
            sinks[i] = k;
            break;
        }
    }
    return 0;
}

static void sink_stop(sink *k)
{
    int i;

    child_server_stop(k->pid);
    k->pid = 0;
    for (i = 0; i < MAX_SINKS; i++)
        if (sinks[i] == k)
            sinks[i] = NULL;
}

static void sink_stop_all(void)
{
    int i;

    for (i = 0; i < MAX_SINKS; i++)
        if (sinks[i])
            sink_stop(sinks[i]);
}

/* One logged message. */
typedef struct {
    char *mail_from;
    char *data;
    char *auth_user;
    char *rcpt[4];
    int nrcpt;
} received;

/* Parses the JSON string starting at the opening quote *pp into a malloc'd
 * UTF-8 string; advances *pp past the closing quote. */
static char *json_string(const char **pp)
{
    const char *p = *pp;
    char *out, *o;

    if (*p != '"')
        return NULL;
    p++;
    out = malloc(strlen(p) + 1);
    o = out;
    while (*p && *p != '"') {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        p++;
        switch (*p) {
        case 'n':
            *o++ = '\n';
            break;
        case 'r':
            *o++ = '\r';
            break;
        case 't':
            *o++ = '\t';
            break;
        case 'b':
            *o++ = '\b';
            break;
        case 'f':
            *o++ = '\f';
            break;
        case 'u': {
            unsigned long cp = strtoul((char[]){p[1], p[2], p[3], p[4], 0}, NULL, 16);
            p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && p[1] == '\\' && p[2] == 'u') {
                unsigned long lo = strtoul((char[]){p[3], p[4], p[5], p[6], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                p += 6;
            }
            if (cp < 0x80) {
                *o++ = (char)cp;
            } else if (cp < 0x800) {
                *o++ = (char)(0xc0 | (cp >> 6));
                *o++ = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x10000) {
                *o++ = (char)(0xe0 | (cp >> 12));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
                *o++ = (char)(0x80 | (cp & 0x3f));
            } else {
                *o++ = (char)(0xf0 | (cp >> 18));
                *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
                *o++ = (char)(0x80 | (cp & 0x3f));
            }
            break;
        }
        default:
            *o++ = *p;
            break; /* \" \\ \/ */
        }
        if (*p)
            p++;
    }
    *o = '\0';
    *pp = *p ? p + 1 : p;
    return out;
}

static char *json_field(const char *line, const char *key)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof pat, "\"%s\": ", key);
    p = strstr(line, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    return json_string(&p);
}

/* Reads the sink's log: up to max messages into out. Returns the count. */
static int sink_read(const sink *k, received *out, int max)
{
    FILE *f = fopen(k->log_path, "r");
    char *line = NULL;
    size_t cap = 0;
    int n = 0;

    if (!f)
        return 0;
    while (n < max && getline(&line, &cap, f) > 0) {
        received *r = &out[n++];
        const char *p;

        memset(r, 0, sizeof *r);
        r->mail_from = json_field(line, "mail_from");
        r->data = json_field(line, "data");
        r->auth_user = json_field(line, "auth_user");
        p = strstr(line, "\"rcpt_tos\": [");
        if (p) {
            p += strlen("\"rcpt_tos\": [");
            while (*p == '"' && r->nrcpt < 4) {
                r->rcpt[r->nrcpt++] = json_string(&p);
                if (*p == ',')
                    p++;
                if (*p == ' ')
                    p++;
            }
        }
    }
    free(line);
    fclose(f);
    return n;
}

static void received_free(received *r, int n)
{
    int i, j;

    for (i = 0; i < n; i++) {
        free(r[i].mail_from);
        free(r[i].data);
        free(r[i].auth_user);
        for (j = 0; j < r[i].nrcpt; j++)
            free(r[i].rcpt[j]);
    }
}

/* ---- the sender on a loop ------------------------------------------------ */

#define MAX_OUTCOMES 64

typedef struct {
    int calls;
    long code;
    int has_error;
    char error[256];
    int timed_out;
    int permanent;
    double duration_ms;
} outcome;

static struct {
    struct ev_loop *loop;
    crier_email_sender *sender;
    outcome out[MAX_OUTCOMES];
    int completed, expected;
    int in_send, reentrant_calls;
    int free_in_done;
} ctx;

static void on_done(void *ud, const crier_email_result *r)
{
    outcome *o;

    (void)ud;
    if (ctx.in_send)
        ctx.reentrant_calls++;
    if (r->token < 0 || r->token >= MAX_OUTCOMES) {
        fprintf(stderr, "unexpected delivery id %lld\n", (long long)r->token);
        CHECK(0);
        return;
    }
    o = &ctx.out[r->token];
    o->calls++;
    o->code = r->smtp_code;
    o->has_error = r->error != NULL;
    snprintf(o->error, sizeof o->error, "%s", r->error ? r->error : "");
    o->timed_out = r->timed_out;
    o->permanent = r->permanent;
    o->duration_ms = r->duration_ms;
    ctx.completed++;
    if (ctx.free_in_done) {
        ctx.free_in_done = 0;
        crier_email_sender_free(ctx.sender);
        ctx.sender = NULL;
    }
    if (ctx.completed >= ctx.expected)
        ev_break(ctx.loop, EVBREAK_ALL);
}

static void on_guard(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* Runs the loop until `expected` completions in all, or seconds have passed. */
static void run_loop(int expected, double seconds)
{
    ev_timer guard;

    ctx.expected = expected;
    ev_timer_init(&guard, on_guard, seconds, 0.0);
    ev_timer_start(ctx.loop, &guard);
    if (ctx.completed < expected)
        ev_run(ctx.loop, 0);
    ev_timer_stop(ctx.loop, &guard);
}

static void new_sender(const crier_email_options *o)
{
    memset(ctx.out, 0, sizeof ctx.out);
    ctx.completed = ctx.expected = 0;
    ctx.sender = crier_email_sender_new(ctx.loop, o, on_done, NULL);
    CHECK(ctx.sender != NULL);
}

static int send_msg(int64_t id, const char *url, const crier_email_message *m, const char *user,
                    const char *password)
{
    crier_email_request req;
    int rc;

    memset(&req, 0, sizeof req);
    req.token = id;
    req.url = url;
    req.username = user;
    req.password = password;
    req.message = *m;
    ctx.in_send = 1;
    rc = crier_email_send(ctx.sender, &req);
    ctx.in_send = 0;
    return rc;
}

static void check_success(int id)
{
    outcome *o = &ctx.out[id];

    if (o->calls != 1 || o->has_error || o->code != 250) {
        fprintf(stderr, "delivery %d: calls %d code %ld error \"%s\"\n", id, o->calls, o->code,
                o->error);
        CHECK(0);
    }
    CHECK(!o->permanent && !o->timed_out);
}

/* Five messages at once: each arrives byte for byte as formatted, to the
 * right recipient only; a redelivery is byte-identical. */
static void test_concurrent(const char *dir)
{
    static const char *const ids[] = {"msg_45a9f0c2d1", "msg_7b10e3aa02", "msg_c3d4e5f6a7",
                                      "msg_0badc0ffee", "msg_99aa88bb77"};
    crier_email_message m[5];
    char url[64], to[5][64], value[1024];
    received got[8];
    sink k;
    int i, j, n;

    if (sink_start(&k, dir, "concurrent", 0, (const char *)NULL) != 0) {
        fprintf(stderr, "could not start smtp_sink.py\n");
        CHECK(0);
        return;
    }
    snprintf(url, sizeof url, "smtp://127.0.0.1:%d", k.port);
    new_sender(NULL);
    for (i = 0; i < 5; i++) {
        snprintf(to[i], sizeof to[i], "user%d@example.org", i);
        m[i] = sample_message(ids[i], to[i]);
    }
    m[1].subject = EVIL_SUBJECT;
    m[2].html = NULL;
    m[3].text = NULL;
    for (i = 0; i < 5; i++)
        CHECK(send_msg(i, url, &m[i], NULL, NULL) == 0);
    CHECK(crier_email_inflight(ctx.sender) == 5);
    run_loop(5, 20.0);
    CHECK(ctx.completed == 5);
    CHECK(ctx.reentrant_calls == 0);
    CHECK(crier_email_inflight(ctx.sender) == 0);
    for (i = 0; i < 5; i++)
        check_success(i);

    /* Redeliver the first one (same content): byte-identical on arrival. */
    CHECK(send_msg(5, url, &m[0], NULL, NULL) == 0);
    run_loop(6, 20.0);
    check_success(5);

    n = sink_read(&k, got, 8);
    CHECK(n == 6);
    for (i = 0; i < 5; i++) {
        char want_id[128], *want;
        size_t want_len;
        received *r = NULL;

        snprintf(want_id, sizeof want_id, "\r\nMessage-ID: <%s@crier.invalid>\r\n", ids[i]);
        for (j = 0; j < n && j < 5; j++)
            if (got[j].data && strstr(got[j].data, want_id))
                r = &got[j];
        if (!r) {
            fprintf(stderr, "message %s did not arrive\n", ids[i]);
            CHECK(0);
            continue;
        }
        want = format_ok(&m[i], NULL, &want_len);
        CHECK(want && strcmp(r->data, want) == 0);
        CHECK_STR(r->mail_from, "billing@acme.example");
        CHECK(r->nrcpt == 1);
        CHECK_STR(r->rcpt[0], to[i]);
        CHECK(!has_header_line(r->data, "Bcc:"));
        CHECK(strstr(r->data, "evil@x") == NULL || i == 1);
        if (i == 0) {
            CHECK(header_value(r->data, "Subject", value, sizeof value) == 0);
            CHECK_STR(value, MARCH_SUBJECT);
            CHECK(n == 6 && got[5].data && strcmp(got[5].data, r->data) == 0);
        }
        if (i == 1) {
            CHECK(header_value(r->data, "Subject", value, sizeof value) == 0);
            CHECK_STR(value, "Rechnung  Bcc: evil@x");
        }
        {
            char *text = part_text(r->data, "text/plain");
            char *html = part_text(r->data, "text/html");
            char *want_text = crlf(i == 2 ? DOT_TEXT "\n" : DOT_TEXT);

            CHECK((text != NULL) == (i != 3));
            CHECK((html != NULL) == (i != 2));
            if (text)
                CHECK_STR(text, want_text); /* "." and ".hidden" lines survive */
            free(want_text);
            free(text);
            free(html);
        }
        free(want);
    }
    received_free(got, n);
    crier_email_sender_free(ctx.sender);
    ctx.sender = NULL;
    sink_stop(&k);
}

/* AUTH through CURLOPT_USERNAME/PASSWORD; a refused or missing login is
 * transient (the relay's configuration, not the message). */
static void test_auth(const char *dir)
{
    crier_email_message m = sample_message("msg_auth", "a@example.org");
    char url[64];
    received got[4];
    sink k;
    int n;

    if (sink_start(&k, dir, "auth", 0, "--auth", "crier:s3cret", (const char *)NULL) != 0) {
        CHECK(0);
        return;
    }
    snprintf(url, sizeof url, "smtp://127.0.0.1:%d", k.port);
    new_sender(NULL);
    CHECK(send_msg(0, url, &m, "crier", "s3cret") == 0);
    CHECK(send_msg(1, url, &m, "crier", "wrong") == 0);
    CHECK(send_msg(2, url, &m, NULL, NULL) == 0);
    run_loop(3, 20.0);
    check_success(0);
    CHECK(ctx.out[1].calls == 1 && ctx.out[1].has_error);
    CHECK(ctx.out[1].code == 535);
    CHECK(!ctx.out[1].permanent && !ctx.out[1].timed_out);
    /* No credentials where the relay wants them: 530, also transient. */
    CHECK(ctx.out[2].calls == 1 && ctx.out[2].has_error);
    CHECK(ctx.out[2].code == 530);
    CHECK(!ctx.out[2].permanent && !ctx.out[2].timed_out);
    n = sink_read(&k, got, 4);
    CHECK(n == 1);
    if (n >= 1)
        CHECK_STR(got[0].auth_user, "crier");
    received_free(got, n);
    crier_email_sender_free(ctx.sender);
    ctx.sender = NULL;
    sink_stop(&k);
}

/* 451 to RCPT: transient; 550 to DATA: permanent; the next message succeeds. */
static void test_rejections(const char *dir)
{
    crier_email_message m = sample_message("msg_reject", "a@example.org");
    char url[64];
    received got[4];
    sink k;
    int n;

    if (sink_start(&k, dir, "451", 0, "--fail-first", "1", "--fail-code", "451",
                   (const char *)NULL) != 0) {
        CHECK(0);
        return;
    }
    snprintf(url, sizeof url, "smtp://127.0.0.1:%d", k.port);
    new_sender(NULL);
    CHECK(send_msg(0, url, &m, NULL, NULL) == 0);
    run_loop(1, 20.0);
    CHECK(ctx.out[0].calls == 1 && ctx.out[0].has_error);
    CHECK(ctx.out[0].code == 451);
    CHECK(!ctx.out[0].permanent && !ctx.out[0].timed_out);
    CHECK(send_msg(1, url, &m, NULL, NULL) == 0);
    run_loop(2, 20.0);
    check_success(1);
    n = sink_read(&k, got, 4);
    CHECK(n == 1);
    received_free(got, n);
    crier_email_sender_free(ctx.sender);
    sink_stop(&k);

    if (sink_start(&k, dir, "550", 0, "--fail-first", "1", "--fail-code", "550", "--fail-stage",
                   "data", (const char *)NULL) != 0) {
        CHECK(0);
        return;
    }
    snprintf(url, sizeof url, "smtp://127.0.0.1:%d", k.port);
    new_sender(NULL);
    CHECK(send_msg(0, url, &m, NULL, NULL) == 0);
    run_loop(1, 20.0);
    CHECK(ctx.out[0].calls == 1 && ctx.out[0].has_error);
    CHECK(ctx.out[0].code == 550);
    CHECK(ctx.out[0].permanent && !ctx.out[0].timed_out);
    CHECK(send_msg(1, url, &m, NULL, NULL) == 0);
    run_loop(2, 20.0);
    check_success(1);
    n = sink_read(&k, got, 4);
    CHECK(n == 1);
    received_free(got, n);
    crier_email_sender_free(ctx.sender);
    ctx.sender = NULL;
    sink_stop(&k);
}

/* Binds 127.0.0.1:0 and returns the listening socket (port in *port). */
static int listen_local(int *port, int do_listen)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0 || (do_listen && listen(fd, 16) != 0)) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* Nothing listening: a transient error; then the server comes up on that port
 * and the retry succeeds. */
static void test_down_then_up(const char *dir)
{
    crier_email_message m = sample_message("msg_retry", "a@example.org");
    char url[64];
    received got[2];
    sink k;
    int port = 0, fd, n;

    fd = listen_local(&port, 0);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd); /* the port is now (very likely) free and nothing listens */
    snprintf(url, sizeof url, "smtp://127.0.0.1:%d", port);
    new_sender(NULL);
    CHECK(send_msg(0, url, &m, NULL, NULL) == 0);
    run_loop(1, 20.0);
    CHECK(ctx.out[0].calls == 1 && ctx.out[0].has_error);
    CHECK(ctx.out[0].code == 0);
    CHECK(!ctx.out[0].permanent && !ctx.out[0].timed_out);

    if (sink_start(&k, dir, "late", port, (const char *)NULL) != 0) {
        CHECK(0);
    } else {
        CHECK(k.port == port);
        CHECK(send_msg(1, url, &m, NULL, NULL) == 0);
        run_loop(2, 20.0);
        check_success(1);
        n = sink_read(&k, got, 2);
        CHECK(n == 1);
        if (n == 1)
            CHECK(strstr(got[0].data, "\r\nMessage-ID: <msg_retry@crier.invalid>\r\n") != NULL);
        received_free(got, n);
        sink_stop(&k);
    }
    crier_email_sender_free(ctx.sender);
    ctx.sender = NULL;
}

/* A server that accepts but never greets: timed_out after the total timeout.
 * Also: max_inflight, refused requests, freeing with transfers in flight. */
static void test_timeout_and_limits(void)
{
    crier_email_message m = sample_message("msg_slow", "a@example.org");
    crier_email_options o;
    crier_email_request req;
    char url[64];
    int port = 0, fd;

    fd = listen_local(&port, 1);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    snprintf(url, sizeof url, "smtp://127.0.0.1:%d", port);
    memset(&o, 0, sizeof o);
    o.total_timeout_ms = 500;
    o.max_inflight = 2; /* connections */
    o.max_queued = 2;   /* messages accepted at once */
    new_sender(&o);
    CHECK(send_msg(0, url, &m, NULL, NULL) == 0);
    run_loop(1, 10.0);
    CHECK(ctx.out[0].calls == 1 && ctx.out[0].has_error && ctx.out[0].timed_out);
    CHECK(!ctx.out[0].permanent);
    CHECK(ctx.out[0].duration_ms >= 400 && ctx.out[0].duration_ms < 5000);

    crier_log_set_level(CRIER_LOG_ERROR); /* the refusals below warn by design */
    CHECK(send_msg(1, url, &m, NULL, NULL) == 0);
    CHECK(send_msg(2, url, &m, NULL, NULL) == 0);
    CHECK(send_msg(3, url, &m, NULL, NULL) == -1); /* full */
    CHECK(crier_email_inflight(ctx.sender) == 2);
    crier_email_sender_free(ctx.sender); /* aborts 1 and 2 without done */
    new_sender(NULL);
    CHECK(send_msg(4, "http://127.0.0.1/", &m, NULL, NULL) == -1);
    CHECK(send_msg(4, "smtp://127.0.0.1:25/\r\nRSET", &m, NULL, NULL) == -1);
    m.to_address = "a@example.org\r\nRCPT TO:<evil@x>";
    CHECK(send_msg(4, url, &m, NULL, NULL) == -1);
    CHECK(crier_email_send(ctx.sender, NULL) == -1);
    memset(&req, 0, sizeof req);
    CHECK(crier_email_send(ctx.sender, &req) == -1);
    CHECK(crier_email_inflight(ctx.sender) == 0);
    crier_log_set_level(CRIER_LOG_INFO);
    crier_log_init_from_env();
    run_loop(1, 0.3);
    CHECK(ctx.completed == 0);
    crier_email_sender_free(ctx.sender);
    ctx.sender = NULL;
    close(fd);
    crier_log_set_level(CRIER_LOG_ERROR);
    CHECK(crier_email_sender_new(NULL, NULL, on_done, NULL) == NULL);
    crier_log_set_level(CRIER_LOG_INFO);
    crier_log_init_from_env();
}

/* Freeing the sender from inside done: no further callbacks, no leaks. */
static void test_free_in_done(const char *dir)
{
    crier_email_message m = sample_message("msg_free", "a@example.org");
    char url[64];
    sink k;

    if (sink_start(&k, dir, "free", 0, (const char *)NULL) != 0) {
        CHECK(0);
        return;
    }
    snprintf(url, sizeof url, "smtp://127.0.0.1:%d", k.port);
    new_sender(NULL);
    CHECK(send_msg(0, url, &m, NULL, NULL) == 0);
    CHECK(send_msg(1, url, &m, NULL, NULL) == 0);
    ctx.free_in_done = 1;
    run_loop(1, 20.0);
    run_loop(2, 0.5); /* the other one must not complete: the sender is gone */
    CHECK(ctx.completed == 1);
    CHECK(ctx.sender == NULL);
    sink_stop(&k);
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* A cached connection to a relay that has stopped answering: freeing the
 * sender must not wait for the reply to QUIT (curl would wait two minutes). */
static void test_free_with_hung_server(const char *dir)
{
    crier_email_message m = sample_message("msg_hung", "a@example.org");
    char url[64];
    double t0;
    sink k;

    if (sink_start(&k, dir, "hung", 0, (const char *)NULL) != 0) {
        CHECK(0);
        return;
    }
    snprintf(url, sizeof url, "smtp://127.0.0.1:%d", k.port);
    new_sender(NULL);
    CHECK(send_msg(0, url, &m, NULL, NULL) == 0);
    run_loop(1, 20.0);
    check_success(0);
    kill(k.pid, SIGSTOP);
    t0 = now_ms();
    crier_email_sender_free(ctx.sender);
    ctx.sender = NULL;
    CHECK(now_ms() - t0 < 2000);
    kill(k.pid, SIGCONT);
    sink_stop(&k);
}

int main(void)
{
    char dir[] = "/tmp/crier-test-email-XXXXXX";
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

    test_format();
    test_format_long();
    test_format_injection();
    test_concurrent(dir);
    test_auth(dir);
    test_rejections(dir);
    test_down_then_up(dir);
    test_timeout_and_limits();
    test_free_in_done(dir);
    test_free_with_hung_server(dir);

    sink_stop_all();
    ev_loop_destroy(ctx.loop);
    curl_global_cleanup();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (check_failures == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (check_failures)
        fprintf(stderr, "test_email: logs in %s\n", dir);
    return CHECK_DONE();
}
