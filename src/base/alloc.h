/* alloc.h — crier's out-of-memory policy in one place: the allocations a
 * process cannot run without (bookkeeping, buffers that grow with a batch)
 * go through these wrappers, which log what failed and abort, so that no
 * caller checks for NULL and a crashed worker's leases go to another one.
 * Allocations whose size comes from input (a request body, a payload, a
 * rendered message) use malloc and fail that unit of work instead
 * (docs/ARCHITECTURE.md, "Errors").
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: log.
 */
#ifndef CRIER_ALLOC_H
#define CRIER_ALLOC_H

#include <stddef.h>

/* Logs "out of memory: <what>" and aborts. */
void crier_out_of_memory(const char *what) __attribute__((noreturn));

/* malloc, calloc, realloc and strdup that never return NULL (they call
 * crier_out_of_memory instead). crier_xmalloc(0) returns a valid pointer. */
void *crier_xmalloc(size_t size) __attribute__((malloc, returns_nonnull));
void *crier_xcalloc(size_t count, size_t size) __attribute__((malloc, returns_nonnull));
void *crier_xrealloc(void *p, size_t size) __attribute__((returns_nonnull));
char *crier_xstrdup(const char *s) __attribute__((malloc, returns_nonnull));

#endif
