/* pg_copy.h — rows for COPY … FROM STDIN in its text format (the default):
 * fields separated by tabs, rows ended by a newline, \N for NULL, and a
 * backslash before a backslash, newline, carriage return or tab in a value.
 * A batch's rows are built here and sent by crier_pg_copy_in (pg_async.h).
 *
 * Layer: pg (src/pg/), may use base.
 * Calls into: strbuf (its growth), decimal (integers).
 */
#ifndef CRIER_PG_COPY_H
#define CRIER_PG_COPY_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *data;
    size_t len, cap;
    size_t rows;
    int fields; /* fields of the row under way */
} crier_pg_copy;

/* Empties the buffer, keeping its memory. */
void crier_pg_copy_reset(crier_pg_copy *c);
/* Appends a text field of n bytes, escaped; s NULL: a NULL field. */
void crier_pg_copy_text(crier_pg_copy *c, const char *s, size_t n);
/* The same for a NUL-terminated string (NULL: a NULL field). */
void crier_pg_copy_str(crier_pg_copy *c, const char *s);
void crier_pg_copy_int64(crier_pg_copy *c, int64_t v);
/* An integer field written in later: CRIER_PG_COPY_SLOT digits of zeros
 * now (PostgreSQL reads leading zeros as nothing); returns its offset for
 * crier_pg_copy_set_int64. */
#define CRIER_PG_COPY_SLOT 19 /* the digits of INT64_MAX */
size_t crier_pg_copy_int64_slot(crier_pg_copy *c);
/* Writes v (0 <= v) into the slot at off, zero-padded to its width. */
void crier_pg_copy_set_int64(crier_pg_copy *c, size_t off, int64_t v);
/* A uuid field from its 16 bytes. */
void crier_pg_copy_uuid(crier_pg_copy *c, const uint8_t bytes[16]);
/* Ends the row under way. */
void crier_pg_copy_end_row(crier_pg_copy *c);
void crier_pg_copy_free(crier_pg_copy *c);

#endif
