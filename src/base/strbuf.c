/* strbuf.c — growable, reusable string storage addressed by offset (see strbuf.h). */
#include "strbuf.h"

#include <stdlib.h>
#include <string.h>

size_t crier_strbuf_add(crier_strbuf *b, const char *s, size_t n)
{
    size_t off = b->len;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p)
            abort();
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->data[b->len + n] = '\0';
    b->len += n + 1;
    return off;
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
