/* pg_array.h — the batch encoder: builds PostgreSQL arrays in the binary wire
 * format (what array_recv reads) for unnest() parameters, so a whole batch
 * travels as one parameter per column of one statement, with no text escaping
 * on our side and no text parsing on the server's; and the parameter set of
 * one statement (text values beside binary arrays).
 *
 * Layer: pg (src/pg/), may use base.
 * Calls into: alloc (base).
 */
#ifndef CRIER_PG_ARRAY_H
#define CRIER_PG_ARRAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Element type OIDs (pg_type.oid; fixed in every PostgreSQL). The SQL must cast
 * the parameter to the matching array type ($1::bigint[], $2::uuid[], …):
 * the server refuses an array whose element type differs. */
#define CRIER_PG_BOOL 16
#define CRIER_PG_INT8 20
#define CRIER_PG_INT4 23
#define CRIER_PG_TEXT 25
#define CRIER_PG_FLOAT8 701
#define CRIER_PG_UUID 2950

typedef struct {
    char *data;
    size_t len, cap;
    size_t count;      /* elements added since begin */
    uint32_t elem_oid; /* element type of the array being built */
    bool has_null;
} crier_pg_array;

/* Starts a new one-dimensional array of elem_oid elements, keeping the
 * buffer's memory. a must be zero-initialised before first use. Allocation
 * failure aborts the process (out of memory). */
void crier_pg_array_begin(crier_pg_array *a, uint32_t elem_oid);
/* Appends a text element of n bytes (stored as is: PostgreSQL text cannot hold
 * NUL bytes, so the caller must not pass them). */
void crier_pg_array_add_text(crier_pg_array *a, const char *s, size_t n);
/* Appends a NUL-terminated text element, or NULL when s is NULL. */
void crier_pg_array_add_str(crier_pg_array *a, const char *s);
/* Appends an SQL NULL element (any element type). */
void crier_pg_array_add_null(crier_pg_array *a);
/* Appends a bigint element (CRIER_PG_INT8 arrays). */
void crier_pg_array_add_int64(crier_pg_array *a, int64_t v);
/* Appends an integer element (CRIER_PG_INT4 arrays). */
void crier_pg_array_add_int32(crier_pg_array *a, int32_t v);
/* Appends a double precision element (CRIER_PG_FLOAT8 arrays). */
void crier_pg_array_add_double(crier_pg_array *a, double v);
/* Appends a boolean element (CRIER_PG_BOOL arrays). */
void crier_pg_array_add_bool(crier_pg_array *a, bool v);
/* Appends a uuid element from its 16 bytes (CRIER_PG_UUID arrays). */
void crier_pg_array_add_uuid(crier_pg_array *a, const uint8_t bytes[16]);
/* Completes the array: returns its bytes (a->len of them), valid until the
 * next begin or free. */
const char *crier_pg_array_end(crier_pg_array *a);
/* Frees the buffer. */
void crier_pg_array_free(crier_pg_array *a);

#define CRIER_PG_MAX_PARAMS 40

/* The parameters of one statement, in the form PQsendQueryParams takes. The
 * pointed-to values must outlive the statement. */
typedef struct {
    const char *values[CRIER_PG_MAX_PARAMS];
    int lengths[CRIER_PG_MAX_PARAMS];
    int formats[CRIER_PG_MAX_PARAMS];
    int n;
} crier_pg_params;

/* Empties the set. */
void crier_pg_params_reset(crier_pg_params *p);
/* Appends a text parameter (NULL: SQL NULL). */
void crier_pg_params_text(crier_pg_params *p, const char *value);
/* Completes array a and appends it as a binary parameter. */
void crier_pg_params_array(crier_pg_params *p, crier_pg_array *a);

#endif
