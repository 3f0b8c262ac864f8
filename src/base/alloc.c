/* alloc.c — allocations that abort on failure (see alloc.h). */
#include "alloc.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void crier_out_of_memory(const char *what)
{
    crier_error("alloc", "out of memory: %s; crier cannot go on (another worker takes over its leases)", what);
    abort();
}

/* Aborts with the size that could not be had. */
static void alloc_failed(const char *call, size_t size)
{
    char what[64];
    snprintf(what, sizeof what, "%s of %zu bytes", call, size);
    crier_out_of_memory(what);
}

void *crier_xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        alloc_failed("malloc", size);
    return p;
}

void *crier_xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        alloc_failed("calloc", count * size);
    return p;
}

void *crier_xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q)
        alloc_failed("realloc", size);
    return q;
}

char *crier_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (!p)
        alloc_failed("strdup", n);
    memcpy(p, s, n);
    return p;
}
