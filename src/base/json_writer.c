/* json_writer.c — the growable JSON-writing buffer (see json_writer.h).
 *
 * Layer: base (src/base/), may use nothing else of crier.
 */
#include "json_writer.h"
#include "alloc.h"

#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void crier_json_buf_add(crier_json_buf *b, const char *s, size_t n)
{
    crier_strbuf_grow(&b->data, &b->cap, b->len + n + 1, 256);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void crier_json_buf_puts(crier_json_buf *b, const char *s)
{
    crier_json_buf_add(b, s, strlen(s));
}

void crier_json_buf_printf(crier_json_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        crier_json_buf_add(b, small, (size_t)n);
        return;
    }
    char *big = crier_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    crier_json_buf_add(b, big, (size_t)n);
    free(big);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t utf8_sequence(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        return (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (s[0] >= 0xe0 && s[0] <= 0xef) {
        if ((s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
            return 0;
        if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))
            return 0; /* overlong, surrogate */
        return 3;
    }
    if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        if ((s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
            return 0;
        if ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
            return 0;
        return 4;
    }
    return 0;
}

void crier_json_buf_string(crier_json_buf *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    if (!s) {
        crier_json_buf_puts(b, "null");
        return;
    }
    crier_json_buf_add(b, "\"", 1);
    while (*p) {
        const unsigned char *run = p;
        /* copy a run of characters that need no escaping */
        while (*p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (p > run)
            crier_json_buf_add(b, (const char *)run, (size_t)(p - run));
        if (!*p)
            break;
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            crier_json_buf_add(b, esc, 2);
            p++;
        } else if (*p < 0x20) {
            switch (*p) {
            case '\n':
                crier_json_buf_puts(b, "\\n");
                break;
            case '\r':
                crier_json_buf_puts(b, "\\r");
                break;
            case '\t':
                crier_json_buf_puts(b, "\\t");
                break;
            default:
                crier_json_buf_printf(b, "\\u%04x", *p);
                break;
            }
            p++;
        } else {
            size_t n = utf8_sequence(p);
            if (n == 0) {
                crier_json_buf_puts(b, "\xef\xbf\xbd"); /* U+FFFD */
                p++;
            } else {
                crier_json_buf_add(b, (const char *)p, n);
                p += n;
            }
        }
    }
    crier_json_buf_add(b, "\"", 1);
}

void crier_json_buf_prometheus_label(crier_json_buf *b, const char *s)
{
    crier_json_buf_add(b, "\"", 1);
    for (; s && *s; s++) {
        if (*s == '\\')
            crier_json_buf_puts(b, "\\\\");
        else if (*s == '"')
            crier_json_buf_puts(b, "\\\"");
        else if (*s == '\n')
            crier_json_buf_puts(b, "\\n");
        else
            crier_json_buf_add(b, s, 1);
    }
    crier_json_buf_add(b, "\"", 1);
}

void crier_json_buf_free(crier_json_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
