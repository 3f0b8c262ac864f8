/* strbuf.c — growable, reusable string storage addressed by offset (see strbuf.h). */
#include "strbuf.h"
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

size_t crier_strbuf_add(crier_strbuf *b, const char *s, size_t n)
{
    size_t off = b->len;
    crier_strbuf_grow(&b->data, &b->cap, b->len + n + 1, 4096);
    memcpy(b->data + b->len, s, n);
    b->data[b->len + n] = '\0';
    b->len += n + 1;
    return off;
}

void crier_strbuf_grow(char **data, size_t *cap, size_t need, size_t first_cap)
{
    if (need <= *cap)
        return;
    size_t want = *cap ? *cap : first_cap;
    while (want < need)
        want *= 2;
    char *p = crier_xrealloc(*data, want);
    *data = p;
    *cap = want;
}

void crier_strbuf_reset(crier_strbuf *b)
{
    b->len = 0;
}

void crier_strbuf_free(crier_strbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
