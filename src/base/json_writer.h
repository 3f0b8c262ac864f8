/* json_writer.h — a growable byte buffer that writes JSON: bytes, formatted
 * text, quoted JSON strings (escaped, invalid UTF-8 replaced) and, for the
 * Prometheus text format, label values. The HTTP API composes its responses
 * with it; the CLI, the benchmarks and the live feeds use it as their
 * growable buffer too.
 *
 * Layer: base (src/base/), may use nothing else of crier (libc, OpenSSL only).
 * Calls into: strbuf (its growth), alloc.
 */
#ifndef CRIER_JSON_WRITER_H
#define CRIER_JSON_WRITER_H

#include <stddef.h>

/* The buffer: data is NUL-terminated after every append (NULL until the
 * first one); zero-initialise it ({0}) before use. Every append that cannot
 * allocate aborts the process (out of memory). */
typedef struct {
    char *data;
    size_t len, cap;
} crier_json_buf;

/* Appends n bytes of s. */
void crier_json_buf_add(crier_json_buf *b, const char *s, size_t n);

/* Appends the NUL-terminated string s as it is (no quoting). */
void crier_json_buf_puts(crier_json_buf *b, const char *s);

/* Appends printf-formatted text (nothing when the format fails). */
void crier_json_buf_printf(crier_json_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends s as a quoted JSON string (control characters escaped, invalid
 * UTF-8 replaced by U+FFFD); NULL appends null. */
void crier_json_buf_string(crier_json_buf *b, const char *s);

/* Appends s as a quoted Prometheus label value (\\, \" and \n escaped);
 * NULL appends "". */
void crier_json_buf_prometheus_label(crier_json_buf *b, const char *s);

/* Frees the buffer's memory and empties it (it can be used again). */
void crier_json_buf_free(crier_json_buf *b);

#endif
