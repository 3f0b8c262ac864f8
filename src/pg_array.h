/* pg_array.h — the batch encoder: builds PostgreSQL array literals in text form
 * ("{\"a\",NULL,\"b\\\"c\"}") for unnest() parameters, so a whole batch travels as
 * one parameter per column of one statement. */
#ifndef CRIER_PG_ARRAY_H
#define CRIER_PG_ARRAY_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *data;
    size_t len, cap;
    size_t count; /* elements added since begin */
} crier_pg_array;

/* Starts a new literal, keeping the buffer's memory. a must be zero-initialised
 * before first use. Allocation failure aborts the process (out of memory). */
void crier_pg_array_begin(crier_pg_array *a);
/* Appends a text element of n bytes, quoted, with '"' and '\' escaped. NUL bytes
 * cannot be represented in PostgreSQL text: the caller must not pass them. */
void crier_pg_array_add_text(crier_pg_array *a, const char *s, size_t n);
/* Appends a NUL-terminated text element, or NULL when s is NULL. */
void crier_pg_array_add_str(crier_pg_array *a, const char *s);
/* Appends an SQL NULL element. */
void crier_pg_array_add_null(crier_pg_array *a);
/* Appends an integer element. */
void crier_pg_array_add_int64(crier_pg_array *a, int64_t v);
/* Appends a float element (%.17g). */
void crier_pg_array_add_double(crier_pg_array *a, double v);
/* Closes the literal and returns it NUL-terminated (valid until the next begin
 * or free). */
const char *crier_pg_array_end(crier_pg_array *a);
/* Frees the buffer. */
void crier_pg_array_free(crier_pg_array *a);

#endif
