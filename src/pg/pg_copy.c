/* pg_copy.c — rows in COPY's text format (see pg_copy.h). */
#include "pg_copy.h"
#include "decimal.h"
#include "strbuf.h"

#include <stdlib.h>
#include <string.h>

/* Makes room for n more bytes and the separator before a field. */
static char *copy_field_start(crier_pg_copy *c, size_t n)
{
    crier_strbuf_grow(&c->data, &c->cap, c->len + n + 2, 64 * 1024);
    if (c->fields++ > 0)
        c->data[c->len++] = '\t';
    return c->data + c->len;
}

void crier_pg_copy_reset(crier_pg_copy *c)
{
    c->len = 0;
    c->rows = 0;
    c->fields = 0;
}

/* The bytes COPY's text format escapes: each as a backslash and this letter. */
static const char copy_escape[256] = {['\\'] = '\\', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};

void crier_pg_copy_text(crier_pg_copy *c, const char *s, size_t n)
{
    if (!s) {
        char *p = copy_field_start(c, 2);
        memcpy(p, "\\N", 2);
        c->len += 2;
        return;
    }
    char *p = copy_field_start(c, 2 * n); /* every byte escaped, at worst */
    char *start = p;
    size_t run = 0; /* the first byte not yet copied */
    for (size_t i = 0; i < n; i++) {
        char esc = copy_escape[(unsigned char)s[i]];
        if (!esc)
            continue;
        /* the plain bytes before it in one copy */
        memcpy(p, s + run, i - run);
        p += i - run;
        *p++ = '\\';
        *p++ = esc;
        run = i + 1;
    }
    memcpy(p, s + run, n - run);
    p += n - run;
    c->len += (size_t)(p - start);
}

void crier_pg_copy_str(crier_pg_copy *c, const char *s)
{
    crier_pg_copy_text(c, s, s ? strlen(s) : 0);
}

void crier_pg_copy_int64(crier_pg_copy *c, int64_t v)
{
    char *p = copy_field_start(c, CRIER_DECIMAL_MAX);
    c->len += crier_decimal_int64(p, v);
}

size_t crier_pg_copy_int64_slot(crier_pg_copy *c)
{
    char *p = copy_field_start(c, CRIER_PG_COPY_SLOT);
    size_t off = c->len;
    memset(p, '0', CRIER_PG_COPY_SLOT);
    c->len += CRIER_PG_COPY_SLOT;
    return off;
}

void crier_pg_copy_set_int64(crier_pg_copy *c, size_t off, int64_t v)
{
    uint64_t m = v < 0 ? 0 : (uint64_t)v;
    for (int i = CRIER_PG_COPY_SLOT - 1; i >= 0; i--, m /= 10)
        c->data[off + (size_t)i] = (char)('0' + m % 10);
}

void crier_pg_copy_uuid(crier_pg_copy *c, const uint8_t bytes[16])
{
    static const char hex[] = "0123456789abcdef";
    char *p = copy_field_start(c, 36);
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[bytes[i] >> 4];
        *p++ = hex[bytes[i] & 15];
    }
    c->len += 36;
}

void crier_pg_copy_end_row(crier_pg_copy *c)
{
    crier_strbuf_grow(&c->data, &c->cap, c->len + 1, 64 * 1024);
    c->data[c->len++] = '\n';
    c->rows++;
    c->fields = 0;
}

void crier_pg_copy_free(crier_pg_copy *c)
{
    free(c->data);
    c->data = NULL;
    c->len = c->cap = c->rows = 0;
    c->fields = 0;
}
