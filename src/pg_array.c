/* pg_array.c — PostgreSQL array literal encoder for batched unnest() (see pg_array.h). */
#include "pg_array.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void array_reserve(crier_pg_array *a, size_t extra)
{
    size_t need = a->len + extra + 1;
    if (need <= a->cap)
        return;
    size_t cap = a->cap ? a->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(a->data, cap);
    if (!p)
        abort();
    a->data = p;
    a->cap = cap;
}

static void array_separator(crier_pg_array *a)
{
    if (a->count++ > 0)
        a->data[a->len++] = ',';
}

void crier_pg_array_begin(crier_pg_array *a)
{
    array_reserve(a, 2);
    a->len = 0;
    a->count = 0;
    a->data[a->len++] = '{';
}

void crier_pg_array_add_text(crier_pg_array *a, const char *s, size_t n)
{
    /* Worst case every byte is escaped, plus quotes and separator. */
    array_reserve(a, 2 * n + 3);
    array_separator(a);
    char *o = a->data + a->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '"' || c == '\\')
            *o++ = '\\';
        *o++ = c;
    }
    *o++ = '"';
    a->len = (size_t)(o - a->data);
}

void crier_pg_array_add_str(crier_pg_array *a, const char *s)
{
    if (s)
        crier_pg_array_add_text(a, s, strlen(s));
    else
        crier_pg_array_add_null(a);
}

void crier_pg_array_add_null(crier_pg_array *a)
{
    array_reserve(a, 5);
    array_separator(a);
    memcpy(a->data + a->len, "NULL", 4);
    a->len += 4;
}

void crier_pg_array_add_int64(crier_pg_array *a, int64_t v)
{
    array_reserve(a, 22);
    array_separator(a);
    a->len += (size_t)snprintf(a->data + a->len, 22, "%" PRId64, v);
}

void crier_pg_array_add_double(crier_pg_array *a, double v)
{
    array_reserve(a, 32);
    array_separator(a);
    a->len += (size_t)snprintf(a->data + a->len, 32, "%.17g", v);
}

const char *crier_pg_array_end(crier_pg_array *a)
{
    array_reserve(a, 1);
    a->data[a->len++] = '}';
    a->data[a->len] = '\0';
    return a->data;
}

void crier_pg_array_free(crier_pg_array *a)
{
    free(a->data);
    a->data = NULL;
    a->len = a->cap = a->count = 0;
}
