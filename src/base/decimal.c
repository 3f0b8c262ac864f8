/* decimal.c — an integer's decimal text (see decimal.h). */
#include "decimal.h"

#include <string.h>

size_t crier_decimal_int64(char out[CRIER_DECIMAL_MAX], int64_t v)
{
    char tmp[CRIER_DECIMAL_MAX];
    size_t n = 0, len = 0;
    /* the magnitude as unsigned: -INT64_MIN does not fit in int64_t */
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + m % 10);
        m /= 10;
    } while (m);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = tmp[--n];
    out[len] = '\0';
    return len;
}
