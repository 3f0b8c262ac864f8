/* decimal.h — an integer's decimal text without printf: the hot paths that
 * write one per row (COPY rows, JSON numbers) spent a tenth of their time in
 * vfprintf (perf of crier bench pipeline).
 *
 * Layer: base (src/base/), may use nothing else of crier (libc only).
 */
#ifndef CRIER_DECIMAL_H
#define CRIER_DECIMAL_H

#include <stddef.h>
#include <stdint.h>

/* The longest text: "-9223372036854775808" (20 bytes), plus its NUL. */
#define CRIER_DECIMAL_MAX 21

/* Writes v in decimal (as printf's %lld would) and a NUL to out; returns the
 * length without the NUL. */
size_t crier_decimal_int64(char out[CRIER_DECIMAL_MAX], int64_t v);

#endif
