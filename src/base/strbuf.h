/* strbuf.h — a growable byte buffer reused across batches: strings are appended
 * and referred to by offset (the buffer may move when it grows).
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: alloc.
 */
#ifndef CRIER_STRBUF_H
#define CRIER_STRBUF_H

#include <stddef.h>

typedef struct {
    char *data;
    size_t len, cap;
} crier_strbuf;

/* Appends n bytes of s plus a NUL; returns the offset of the copy. Allocation
 * failure aborts the process (out of memory). */
size_t crier_strbuf_add(crier_strbuf *b, const char *s, size_t n);
/* Empties the buffer, keeping its memory. */
void crier_strbuf_reset(crier_strbuf *b);
/* Frees the buffer's memory. */
void crier_strbuf_free(crier_strbuf *b);

/* The growth of a heap buffer (this one's, the JSON writer's): makes *data
 * (realloc'd, *cap bytes) hold at least need bytes, doubling from
 * first_cap; nothing when it does already. Allocation failure aborts the
 * process (out of memory). */
void crier_strbuf_grow(char **data, size_t *cap, size_t need, size_t first_cap);
/* The NUL-terminated string at offset off. */
static inline const char *crier_strbuf_at(const crier_strbuf *b, size_t off)
{
    return b->data + off;
}

#endif
